package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
)

// statsColumns are the columns of `rpr stats` and `rpr top`, in order,
// for services that are not sharded; withShards adds SHARDS after LANE.
var statsColumns = []string{"SERVICE", "LANE", "LENGTH", "LAG", "PENDING", "OLDEST", "CONSUMERS", "WORKERS", "RETRY", "DLQ", "CALLS/S"}

// columnsFor returns the columns of a table of rows: statsColumns, with
// SHARDS when some service of rows is sharded.
func columnsFor(rows []statsRow) []string {
	for _, r := range rows {
		if r.Shards > 1 {
			return slices.Insert(slices.Clone(statsColumns), 2, "SHARDS")
		}
	}
	return statsColumns
}

// column returns the index of the column named name in columns.
func column(columns []string, name string) int { return slices.Index(columns, name) }

// rowKey names a row: a lane of a service.
type rowKey struct{ service, lane string }

// statsRow is one row of the live view: a lane's latest sample and the
// call rate since the sample before it.
type statsRow struct {
	admin.ServiceStats
	// rate is calls/s since the previous sample; rateOK is false when
	// there was no comparable previous sample.
	rate   float64
	rateOK bool
	// firstOfService is true on the service's first row, which alone
	// shows the service-wide DLQ figure.
	firstOfService bool
}

func (r statsRow) key() rowKey { return rowKey{r.Service, r.Lane} }

// cells renders the row as the text of columns (statsColumns, or
// columnsFor's).
func (r statsRow) cells(columns []string) []string {
	rate := "-"
	if r.rateOK {
		rate = strconv.FormatFloat(r.rate, 'f', 1, 64)
	}
	oldest := "-"
	if r.Pending > 0 {
		oldest = formatAge(r.OldestPending)
	}
	// The DLQ holds the letters of every lane: shown once per service, on
	// its first row, with a ditto mark on the others.
	dlq := `"`
	if r.firstOfService {
		dlq = strconv.FormatInt(r.DeadLetters, 10)
		if r.DeadLettersFull {
			dlq += " FULL" // at the cap: servers hold dead letters back
		}
	}
	out := make([]string, 0, len(columns))
	for _, c := range columns {
		var cell string
		switch c {
		case "SERVICE":
			cell = r.Service
		case "LANE":
			cell = r.Lane
		case "SHARDS":
			cell = strconv.Itoa(r.Shards)
		case "LENGTH":
			cell = strconv.FormatInt(r.Length, 10)
		case "LAG":
			cell = strconv.FormatInt(r.Lag, 10)
		case "PENDING":
			cell = strconv.FormatInt(r.Pending, 10)
		case "OLDEST":
			cell = oldest
		case "CONSUMERS":
			cell = strconv.FormatInt(r.Consumers, 10)
		case "WORKERS":
			cell = strconv.Itoa(r.LiveWorkers)
		case "RETRY":
			cell = strconv.FormatInt(r.Retrying, 10)
		case "DLQ":
			cell = dlq
		case "CALLS/S":
			cell = rate
		}
		out = append(out, cell)
	}
	return out
}

// rowsSince pairs each lane of cur with its sample in prev (if any) and
// computes the call rate.
func rowsSince(prev map[rowKey]admin.ServiceStats, cur []admin.ServiceStats) []statsRow {
	rows := make([]statsRow, len(cur))
	for i, st := range cur {
		rows[i] = statsRow{ServiceStats: st, firstOfService: i == 0 || cur[i-1].Service != st.Service}
		if p, ok := prev[rows[i].key()]; ok {
			rows[i].rate, rows[i].rateOK = st.CallsPerSecond(p)
		}
	}
	return rows
}

// byLane indexes samples by service and lane.
func byLane(samples []admin.ServiceStats) map[rowKey]admin.ServiceStats {
	m := make(map[rowKey]admin.ServiceStats, len(samples))
	for _, st := range samples {
		m[rowKey{st.Service, st.Lane}] = st
	}
	return m
}

// heldLanes returns the lanes of svc that hold requests (queued, running
// or waiting for a retry) in some shard, as Service.Lanes finds them.
// Service.LaneStats finds the routed and served lanes by itself, but not a
// lane whose route was removed and whose servers are long gone: that takes
// a scan of the keyspace, which the live view does not repeat at every
// sample.
func heldLanes(ctx context.Context, svc *admin.Service) ([]string, error) {
	statuses, err := svc.Lanes(ctx)
	if err != nil {
		return nil, err
	}
	var lanes []string
	for _, st := range statuses {
		if st.Queued > 0 {
			lanes = append(lanes, st.Lane)
		}
	}
	return lanes, nil
}

// sampleServices reads the figures of each lane of services, in order,
// with the lanes held names for each besides those Service.LaneStats
// finds.
func sampleServices(ctx context.Context, a *admin.Client, services []string, held map[string][]string) ([]admin.ServiceStats, error) {
	var out []admin.ServiceStats
	for _, svc := range services {
		lanes, err := a.Service(svc).LaneStats(ctx, held[svc]...)
		if err != nil {
			return nil, err
		}
		out = append(out, lanes...)
	}
	return out, nil
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

// check refuses an --interval that is not positive and arguments that
// cannot be service names.
func (f *liveViewFlags) check(args []string) error {
	if f.interval <= 0 {
		return badInput(fmt.Errorf("--interval must be positive, got %v; e.g. --interval 2s", f.interval))
	}
	for _, arg := range args {
		if err := checkServiceName(arg, "rpr stats examples.greeter.v1.Greeter"); err != nil {
			return err
		}
	}
	return nil
}

// services is the services named in args, each of which Redis must know,
// else every service under the prefix.
func (f *liveViewFlags) services(ctx context.Context, a *admin.Client, args []string) ([]string, error) {
	if len(args) == 0 {
		names, err := a.Services(ctx)
		if err != nil {
			return nil, badInput(err)
		}
		return names, nil
	}
	for _, name := range args {
		if err := requireServiceOrData(ctx, a, f.url, name); err != nil {
			return nil, err
		}
	}
	return args, nil
}

// statsDoc is -o json of rpr stats.
type statsDoc struct {
	Rows []statsRowJSON `json:"rows"`
}

// statsRowJSON is one row of rpr stats -o json: the columns of the table,
// with the oldest pending request's age in seconds.
type statsRowJSON struct {
	Service              string   `json:"service"`
	Lane                 string   `json:"lane"`
	Shards               int      `json:"shards"`
	Length               int64    `json:"length"`
	Lag                  int64    `json:"lag"`
	Pending              int64    `json:"pending"`
	OldestPendingSeconds float64  `json:"oldest_pending_seconds"`
	Consumers            int64    `json:"consumers"`
	LiveWorkers          int      `json:"live_workers"`
	Retrying             int64    `json:"retrying"`
	DeadLetters          int64    `json:"dead_letters"`
	DeadLetterCap        int64    `json:"dead_letter_cap"`
	DeadLettersFull      bool     `json:"dead_letters_full"`
	CallsPerSecond       *float64 `json:"calls_per_second"`
}

func writeStatsJSON(out io.Writer, rows []statsRow) error {
	doc := statsDoc{Rows: []statsRowJSON{}}
	for _, r := range rows {
		row := statsRowJSON{
			Service: r.Service, Lane: r.Lane, Shards: max(r.Shards, 1), Length: r.Length, Lag: r.Lag, Pending: r.Pending,
			OldestPendingSeconds: r.OldestPending.Seconds(), Consumers: r.Consumers, LiveWorkers: r.LiveWorkers,
			Retrying: r.Retrying, DeadLetters: r.DeadLetters, DeadLetterCap: r.DeadLetterCap, DeadLettersFull: r.DeadLettersFull,
		}
		if r.rateOK {
			rate := r.rate
			row.CallsPerSecond = &rate
		}
		doc.Rows = append(doc.Rows, row)
	}
	return writeJSON(out, doc)
}

// statsColumnHelp explains the columns, for both commands' --help.
const statsColumnHelp = `One row per lane of each service: the default lane, the lanes its routes
name, those its workers serve, and those that still hold requests. A
sharded service's figures are over all its shards.

Columns:
  SERVICE    the service's full name
  LANE       the lane ("default" unless routes send calls elsewhere)
  SHARDS     the service's shard count (shown when some service has more than one)
  LENGTH     requests in the lane's streams: waiting plus being worked on
  LAG        requests no worker has read yet
  PENDING    requests read by a worker and not yet answered
  OLDEST     age of the oldest pending request (Redis's clock)
  CONSUMERS  consumers the "workers" groups know (past and present)
  WORKERS    workers of the lane with a heartbeat in the last 5s
  RETRY      async requests waiting in the retry sets (a retry or a delay)
  DLQ        dead letters of the service, all lanes (on its first row; " on the others)
  CALLS/S    calls enqueued per second over the last interval`

func newStatsCommand() *cobra.Command {
	var flags liveViewFlags
	var output string
	cmd := &cobra.Command{
		Use:   "stats [pkg.Service...]",
		Short: "Print the queue figures of services once (length, lag, pending, DLQ, calls/s)",
		Long: `stats reads each service's request streams, consumer groups, retry
sets, dead-letter streams and worker heartbeats from Redis, twice,
--interval apart, and prints one table. With no service named it shows
every service under --prefix that has published its schema or has worker
heartbeats (as "rpr ls" does); a name Redis does not know is exit status 1.
-o json prints the same figures as JSON, one object per row.

` + statsColumnHelp,
		Example: `  rpr stats --redis redis://10.0.0.5:6379/0
  rpr stats --interval 5s examples.greeter.v1.Greeter
  rpr stats -o json | jq '.rows[] | select(.lag > 100)'`,
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: completeServices(&flags.redisFlags, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := flags.check(args); err != nil {
				return err
			}
			if err := checkOutput(output, "table", "json"); err != nil {
				return err
			}
			ctx := cmd.Context()
			rdb, err := flags.open(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			a := flags.handle(rdb)
			services, err := flags.services(ctx, a, args)
			if err != nil {
				return err
			}
			if len(services) == 0 && output == "json" {
				return writeJSON(cmd.OutOrStdout(), statsDoc{Rows: []statsRowJSON{}})
			}
			if len(services) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "no services under prefix %q (no published schema or worker heartbeats found)\n", flags.prefix)
				return nil
			}
			held := map[string][]string{}
			for _, svc := range services {
				if held[svc], err = heldLanes(ctx, a.Service(svc)); err != nil {
					return badInput(err)
				}
			}
			first, err := sampleServices(ctx, a, services, held)
			if err != nil {
				return badInput(err)
			}
			select {
			case <-time.After(flags.interval):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			second, err := sampleServices(ctx, a, services, held)
			if err != nil {
				return badInput(err)
			}
			rows := rowsSince(byLane(first), second)
			if output == "json" {
				return writeStatsJSON(cmd.OutOrStdout(), rows)
			}
			printStats(cmd.OutOrStdout(), rows)
			return nil
		},
	}
	flags.registerLiveView(cmd, "time between the two samples the calls/s figure compares")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

// printStats writes rows as an aligned table under a header.
func printStats(out io.Writer, rows []statsRow) {
	columns := columnsFor(rows)
	tw := newTable(out)
	fmt.Fprintln(tw, strings.Join(columns, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r.cells(columns), "\t"))
	}
	_ = tw.Flush()
}
