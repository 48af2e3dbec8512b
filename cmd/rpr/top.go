package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

// Thresholds at which `rpr top` colours a cell. Backlog thresholds relative
// to a stream's cap wait for capped streams; until then LAG and PENDING are
// judged by whether anything drains them.
const (
	oldestWarn     = time.Minute
	oldestCritical = 10 * time.Minute
	// lagStuckSamples is how many refreshes in a row the lag may stay
	// above zero without falling before LAG turns yellow: the workers are
	// not keeping up.
	lagStuckSamples = 5
	// historyLen is how many samples the sparklines show.
	historyLen = 30
	// heldLanesEvery is how often top looks again for lanes that hold
	// requests but are neither routed nor served (a keyspace scan).
	heldLanesEvery = 30 * time.Second
)

var (
	warnStyle     = lipgloss.NewStyle().Foreground(lipgloss.Color("3")).Bold(true)
	criticalStyle = lipgloss.NewStyle().Foreground(lipgloss.Color("1")).Bold(true)
	headerStyle   = lipgloss.NewStyle().Bold(true).Reverse(true)
	dimStyle      = lipgloss.NewStyle().Faint(true)
)

func newTopCommand() *cobra.Command {
	var flags liveViewFlags
	cmd := &cobra.Command{
		Use:   "top [pkg.Service...]",
		Short: "Live view of services' queues, refreshed every second (q quits)",
		Long: `top shows the table of "rpr stats" live, refreshed every --interval, with
sparklines of each lane's calls/s and backlog (LAG + PENDING) over the
last 30 refreshes. With no service named it shows every service under
--prefix that has published its schema or has worker heartbeats (as "rpr ls"
does), and picks up new ones as they appear. Lanes that hold requests but
are neither routed nor served are looked for every 30s (a keyspace scan).
Press q or ctrl+c to quit. top needs a terminal; in a script or a pipe
use rpr stats.

Colours: yellow is a warning, red is critical.
  OLDEST   yellow above 1m, red above 10m
  DLQ      yellow above 0
  WORKERS  red at 0
  LAG      red when no worker is live, yellow when it has not fallen for 5 refreshes
  PENDING  red when no worker is live (held by workers that are gone)

` + statsColumnHelp,
		Example: `  rpr top --redis redis://10.0.0.5:6379/0
  rpr top examples.greeter.v1.Greeter`,
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: completeServices(&flags.redisFlags, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := flags.check(args); err != nil {
				return err
			}
			ctx := cmd.Context()
			rdb, err := flags.open(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			a := flags.handle(rdb)
			for _, name := range args {
				if err := requireServiceOrData(ctx, a, flags.url, name); err != nil {
					return err
				}
			}
			if !isTerminal(cmd.OutOrStdout()) || !isTerminal(cmd.InOrStdin()) {
				return badInput(errors.New("top needs a terminal (stdin and stdout) to draw its live view; in a script or a pipe use rpr stats (-o json for JSON)"))
			}
			m := newTopModel(ctx, a, flags, args)
			_, err = tea.NewProgram(m, tea.WithContext(ctx)).Run()
			if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
				return nil // interrupted or terminated by a signal
			}
			return err
		},
	}
	flags.registerLiveView(cmd, "time between refreshes")
	return cmd
}

// serviceHistory is what top remembers of one lane of a service across
// refreshes.
type serviceHistory struct {
	rates   []float64 // calls/s, newest last
	backlog []float64 // lag + pending, newest last
	lag     []int64   // for the "not keeping up" warning
}

func appendCapped[T any](s []T, v T) []T {
	s = append(s, v)
	if len(s) > historyLen {
		s = s[len(s)-historyLen:]
	}
	return s
}

// topModel is the bubbletea model of `rpr top`.
type topModel struct {
	ctx      context.Context
	a        *admin.Client
	flags    liveViewFlags
	services []string // named on the command line; nil to discover

	prev    map[rowKey]admin.ServiceStats
	rows    []statsRow
	history map[rowKey]*serviceHistory
	held    *heldLaneCache
	err     error
	width   int
}

// heldLaneCache is what top last found of the lanes that hold requests
// (see heldLanes), by service. Samples are taken one at a time, in the
// background; the mutex only makes that not matter.
type heldLaneCache struct {
	mu    sync.Mutex
	lanes map[string][]string
	at    map[string]time.Time // when each service's were found
}

// get returns svc's held lanes, looking again when they are older
// than heldLanesEvery. A failed look keeps the last lanes found.
func (c *heldLaneCache) get(ctx context.Context, svc *admin.Service) []string {
	service := svc.Name()
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, ok := c.at[service]; !ok || time.Since(at) > heldLanesEvery {
		if lanes, err := heldLanes(ctx, svc); err == nil {
			c.lanes[service] = lanes
		}
		c.at[service] = time.Now()
	}
	return c.lanes[service]
}

// sampleMsg carries one refresh's figures.
type sampleMsg struct {
	stats []admin.ServiceStats
	err   error
}

// tickMsg asks for the next refresh.
type tickMsg struct{}

func newTopModel(ctx context.Context, a *admin.Client, flags liveViewFlags, services []string) topModel {
	return topModel{ctx: ctx, a: a, flags: flags, services: services, history: map[rowKey]*serviceHistory{},
		held: &heldLaneCache{lanes: map[string][]string{}, at: map[string]time.Time{}}}
}

// sample reads the figures in the background; a slow Redis delays the
// next refresh instead of freezing the screen.
func (m topModel) sample() tea.Msg {
	ctx, cancel := context.WithTimeout(m.ctx, max(5*time.Second, 2*m.flags.interval))
	defer cancel()
	services := m.services
	if len(services) == 0 {
		var err error
		if services, err = m.a.Services(ctx); err != nil {
			return sampleMsg{err: err}
		}
	}
	held := map[string][]string{}
	for _, svc := range services {
		held[svc] = m.held.get(ctx, m.a.Service(svc))
	}
	stats, err := sampleServices(ctx, m.a, services, held)
	if err == nil && stats == nil {
		stats = []admin.ServiceStats{} // sampled: no services
	}
	return sampleMsg{stats: stats, err: err}
}

func (m topModel) Init() tea.Cmd { return m.sample }

func (m topModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyPressMsg:
		switch msg.String() {
		case "q", "ctrl+c":
			return m, tea.Quit
		}
	case tea.WindowSizeMsg:
		m.width = msg.Width
	case tickMsg:
		return m, m.sample
	case sampleMsg:
		m.record(msg)
		return m, tea.Tick(m.flags.interval, func(time.Time) tea.Msg { return tickMsg{} })
	}
	return m, nil
}

// record folds a refresh into the rows and the history. A failed refresh
// keeps the last figures on screen under the error.
func (m *topModel) record(msg sampleMsg) {
	m.err = msg.err
	if msg.err != nil {
		return
	}
	m.rows = rowsSince(m.prev, msg.stats)
	m.prev = byLane(msg.stats)
	for _, r := range m.rows {
		h := m.history[r.key()]
		if h == nil {
			h = &serviceHistory{}
			m.history[r.key()] = h
		}
		if r.rateOK {
			h.rates = appendCapped(h.rates, r.rate)
		}
		h.backlog = appendCapped(h.backlog, float64(r.Lag+r.Pending))
		h.lag = appendCapped(h.lag, r.Lag)
	}
}

// cellStyles returns the style of each of the row's cells under columns
// (nil: plain).
func (m topModel) cellStyles(r statsRow, columns []string) []*lipgloss.Style {
	styles := make([]*lipgloss.Style, len(columns))
	set := func(name string, style *lipgloss.Style) { styles[column(columns, name)] = style }
	noWorkers := r.LiveWorkers == 0
	if noWorkers {
		set("WORKERS", &criticalStyle)
	}
	switch {
	case r.Lag > 0 && noWorkers:
		set("LAG", &criticalStyle)
	case r.Lag > 0 && m.lagStuck(r.key()):
		set("LAG", &warnStyle)
	}
	if r.Pending > 0 && noWorkers {
		set("PENDING", &criticalStyle)
	}
	switch {
	case r.Pending > 0 && r.OldestPending > oldestCritical:
		set("OLDEST", &criticalStyle)
	case r.Pending > 0 && r.OldestPending > oldestWarn:
		set("OLDEST", &warnStyle)
	}
	if r.DeadLetters > 0 && r.firstOfService {
		set("DLQ", &warnStyle)
	}
	return styles
}

// lagStuck reports whether the lane's lag has stayed above zero without
// falling over the last lagStuckSamples refreshes.
func (m topModel) lagStuck(key rowKey) bool {
	h := m.history[key]
	if h == nil || len(h.lag) < lagStuckSamples {
		return false
	}
	recent := h.lag[len(h.lag)-lagStuckSamples:]
	for i, v := range recent {
		if v == 0 || (i > 0 && v < recent[i-1]) {
			return false
		}
	}
	return true
}

func (m topModel) View() tea.View {
	var b strings.Builder
	status := fmt.Sprintf("rpr top — %s  prefix %s  every %v", tunnel.RedactURL(m.flags.url), m.flags.prefix, m.flags.interval)
	if len(m.rows) > 0 {
		status += "  Redis time " + m.rows[0].RedisTime.Format("15:04:05")
	}
	b.WriteString(status + "  " + dimStyle.Render("q: quit") + "\n\n")

	// Column widths from the plain text, so styles do not disturb them.
	columns := columnsFor(m.rows)
	cells := make([][]string, len(m.rows))
	widths := make([]int, len(columns))
	for i, c := range columns {
		widths[i] = len(c)
	}
	for i, r := range m.rows {
		cells[i] = r.cells(columns)
		for j, c := range cells[i] {
			widths[j] = max(widths[j], lipgloss.Width(c))
		}
	}
	b.WriteString(headerStyle.Render(joinPadded(columns, widths, nil)) + "\n")
	for i, r := range m.rows {
		b.WriteString(joinPadded(cells[i], widths, m.cellStyles(r, columns)) + "\n")
	}
	switch {
	case m.rows == nil && m.err == nil:
		b.WriteString(dimStyle.Render("reading Redis…") + "\n")
	case len(m.rows) == 0 && m.err == nil:
		b.WriteString(dimStyle.Render(fmt.Sprintf("no services under prefix %q (no published schema or worker heartbeats found)", m.flags.prefix)) + "\n")
	}

	if len(m.rows) > 0 {
		b.WriteString("\n" + headerStyle.Render(fmt.Sprintf("%-*s  %-*s  %-*s %-*s", widths[0], "HISTORY", widths[1], "LANE", historyLen+10, "CALLS/S", historyLen+10, "BACKLOG")) + "\n")
		for _, r := range m.rows {
			h := m.history[r.key()]
			rate, backlog := "-", "-"
			if n := len(h.rates); n > 0 {
				rate = strconv.FormatFloat(h.rates[n-1], 'f', 1, 64)
			}
			if n := len(h.backlog); n > 0 {
				backlog = strconv.FormatFloat(h.backlog[n-1], 'f', 0, 64)
			}
			fmt.Fprintf(&b, "%-*s  %-*s  %s %-9s %s %-9s\n", widths[0], r.Service, widths[1], r.Lane,
				sparkline(h.rates, historyLen), rate, sparkline(h.backlog, historyLen), backlog)
		}
	}
	if m.err != nil {
		b.WriteString("\n" + criticalStyle.Render("refresh failed: "+m.err.Error()) + "\n")
	}

	content := b.String()
	if m.width > 0 {
		content = lipgloss.NewStyle().MaxWidth(m.width).Render(content)
	}
	v := tea.NewView(content)
	v.AltScreen = true
	v.WindowTitle = "rpr top"
	return v
}

// joinPadded pads each cell to its column's width, styles it, and joins
// the cells with two spaces.
func joinPadded(cells []string, widths []int, styles []*lipgloss.Style) string {
	parts := make([]string, len(cells))
	for i, c := range cells {
		padded := c + strings.Repeat(" ", max(widths[i]-lipgloss.Width(c), 0))
		if styles != nil && styles[i] != nil {
			padded = styles[i].Render(padded)
		}
		parts[i] = padded
	}
	return strings.Join(parts, "  ")
}

// sparkBars are the eight heights of a sparkline cell, lowest first.
var sparkBars = []rune("▁▂▃▄▅▆▇█")

// sparkline draws the last width values as bars scaled to their maximum,
// right-aligned in width cells. Any value above zero gets at least the
// second bar, so a trickle stays visible next to a burst.
func sparkline(values []float64, width int) string {
	if len(values) > width {
		values = values[len(values)-width:]
	}
	peak := 0.0
	for _, v := range values {
		peak = max(peak, v)
	}
	var b strings.Builder
	b.WriteString(strings.Repeat(" ", width-len(values)))
	for _, v := range values {
		level := 0
		if peak > 0 && v > 0 {
			level = max(1, int(math.Round(v/peak*float64(len(sparkBars)-1))))
		}
		b.WriteRune(sparkBars[level])
	}
	return b.String()
}
