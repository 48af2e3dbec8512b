package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/tunnel"
)

// statsColumns are the columns of `rpr stats` and `rpr top`, in order.
var statsColumns = []string{"SERVICE", "LANE", "LENGTH", "LAG", "PENDING", "OLDEST", "CONSUMERS", "WORKERS", "RETRY", "DLQ", "CALLS/S"}

// statsRow is one row of the live view: a service's latest sample and the
// call rate since the sample before it.
type statsRow struct {
	tunnel.ServiceStats
	// rate is calls/s since the previous sample; rateOK is false when
	// there was no comparable previous sample.
	rate   float64
	rateOK bool
}

// cells renders the row as the text of statsColumns.
func (r statsRow) cells() []string {
	rate := "-"
	if r.rateOK {
		rate = strconv.FormatFloat(r.rate, 'f', 1, 64)
	}
	oldest := "-"
	if r.Pending > 0 {
		oldest = formatAge(r.OldestPending)
	}
	return []string{
		r.Service,
		// Services have one request stream until lanes exist; "-" is it.
		"-",
		strconv.FormatInt(r.Length, 10),
		strconv.FormatInt(r.Lag, 10),
		strconv.FormatInt(r.Pending, 10),
		oldest,
		strconv.FormatInt(r.Consumers, 10),
		strconv.Itoa(r.LiveWorkers),
		strconv.FormatInt(r.Retrying, 10),
		strconv.FormatInt(r.DeadLetters, 10),
		rate,
	}
}

// rowsSince pairs each service of cur with its sample in prev (if any)
// and computes the call rate.
func rowsSince(prev map[string]tunnel.ServiceStats, cur []tunnel.ServiceStats) []statsRow {
	rows := make([]statsRow, len(cur))
	for i, st := range cur {
		rows[i] = statsRow{ServiceStats: st}
		if p, ok := prev[st.Service]; ok {
			rows[i].rate, rows[i].rateOK = st.CallsPerSecond(p)
		}
	}
	return rows
}

// byService indexes samples by service name.
func byService(samples []tunnel.ServiceStats) map[string]tunnel.ServiceStats {
	m := make(map[string]tunnel.ServiceStats, len(samples))
	for _, st := range samples {
		m[st.Service] = st
	}
	return m
}

// formatAge prints a duration compactly for a table cell: 850ms, 12.3s,
// 4m05s, 2h03m, 3d04h.
func formatAge(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Truncate(100*time.Millisecond).Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// liveViewFlags are the flags `rpr stats` and `rpr top` share.
type liveViewFlags struct {
	redisFlags
	interval time.Duration
}

func (f *liveViewFlags) registerLiveView(cmd *cobra.Command, intervalHelp string) {
	f.redisFlags.register(cmd)
	cmd.Flags().DurationVar(&f.interval, "interval", time.Second, intervalHelp)
}

// statsColumnHelp explains the columns, for both commands' --help.
const statsColumnHelp = `Columns:
  SERVICE    the service's full name
  LANE       the request stream's lane ("-": the service's only stream)
  LENGTH     requests in the stream: waiting plus being worked on
  LAG        requests no worker has read yet
  PENDING    requests read by a worker and not yet answered
  OLDEST     age of the oldest pending request (Redis's clock)
  CONSUMERS  consumers the "workers" group knows (past and present)
  WORKERS    workers with a heartbeat in the last 5s
  RETRY      async requests waiting in the retry set (a retry or a delay)
  DLQ        entries in the dead-letter stream
  CALLS/S    calls enqueued per second over the last interval`

func newStatsCommand() *cobra.Command {
	var flags liveViewFlags
	cmd := &cobra.Command{
		Use:   "stats [pkg.Service...]",
		Short: "Print the queue figures of services once (length, lag, pending, DLQ, calls/s)",
		Long: `stats reads each service's request stream, consumer group, dead-letter
stream and worker heartbeats from Redis, twice, --interval apart, and prints
one table. With no service named it shows every service under --prefix that
has published its schema or has worker heartbeats (as "rpr ls" does).

` + statsColumnHelp,
		Example: `  rpr stats --redis redis://10.0.0.5:6379/0
  rpr stats --interval 5s examples.greeter.v1.Greeter`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if flags.interval <= 0 {
				return fmt.Errorf("--interval must be positive, got %v", flags.interval)
			}
			ctx := cmd.Context()
			rdb, err := flags.open(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			first, err := tunnel.InspectAll(ctx, rdb, flags.prefix, args...)
			if err != nil {
				return err
			}
			if len(first) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "no services under prefix %q (no published schema or worker heartbeats found)\n", flags.prefix)
				return nil
			}
			select {
			case <-time.After(flags.interval):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			names := make([]string, len(first))
			for i, st := range first {
				names[i] = st.Service
			}
			second, err := tunnel.InspectAll(ctx, rdb, flags.prefix, names...)
			if err != nil {
				return err
			}
			printStats(cmd.OutOrStdout(), rowsSince(byService(first), second))
			return nil
		},
	}
	flags.registerLiveView(cmd, "time between the two samples the calls/s figure compares")
	return cmd
}

// printStats writes rows as an aligned table under a header.
func printStats(out io.Writer, rows []statsRow) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(statsColumns, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r.cells(), "\t"))
	}
	_ = tw.Flush()
}
