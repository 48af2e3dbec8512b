package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

func newHealthCommand() *cobra.Command {
	var rf redisFlags
	var timeout time.Duration
	var output string
	cmd := &cobra.Command{
		Use:   "health pkg.Service",
		Short: "Exit 0 when a live worker serves the service, 1 otherwise (for readiness probes)",
		Long: `health reads the service's worker heartbeats from Redis and prints each
worker with its last beat. It exits 0 when at least one worker is live
(beat within the last 5s), 1 when none is (or Redis knows no such service),
and 2 when Redis cannot be read. -o json prints the same as JSON.`,
		Example: `  rpr health --redis redis://10.0.0.5:6379/0 examples.greeter.v1.Greeter
  rpr health examples.greeter.v1.Greeter -o json | jq .serving`,
		Args:              usageArgs(1, 1, "rpr health SERVICE, e.g. rpr health examples.greeter.v1.Greeter"),
		ValidArgsFunction: completeServices(&rf, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkServiceName(args[0], "rpr health examples.greeter.v1.Greeter"); err != nil {
				return err
			}
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			ctx, a, done, err := rf.connect(cmd, timeout)
			if err != nil {
				return err
			}
			defer done()
			h, err := a.Service(args[0]).Health(ctx)
			if err != nil {
				return badInput(err)
			}
			if len(h.Workers) == 0 {
				if err := requireService(ctx, a, rf.url, args[0]); err != nil {
					return err
				}
			}
			if output == "json" {
				err = writeJSON(cmd.OutOrStdout(), healthJSON(h))
			} else {
				printHealth(cmd.OutOrStdout(), h)
			}
			if err == nil && !h.Serving() {
				return exitError{code: exitFailed}
			}
			return err
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up on Redis after this long")
	return cmd
}

// workerJSON is one worker in -o json of rpr health and rpr ls.
type workerJSON struct {
	ID       string    `json:"id"`
	Live     bool      `json:"live"`
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	Lane     string    `json:"lane"`
	Shards   []int     `json:"shards,omitempty"`
	Schema   string    `json:"schema,omitempty"`
	Methods  []string  `json:"methods,omitempty"`
	LastBeat time.Time `json:"last_beat"`
}

// healthDoc is -o json of rpr health.
type healthDoc struct {
	Service string       `json:"service"`
	Serving bool         `json:"serving"`
	Workers []workerJSON `json:"workers"`
}

func healthJSON(h admin.Health) healthDoc {
	return healthDoc{Service: h.Service, Serving: h.Serving(), Workers: workersJSON(h.Workers)}
}

// workersJSON is ws for -o json: lanes named, never null.
func workersJSON(ws []admin.WorkerStatus) []workerJSON {
	out := []workerJSON{}
	for _, w := range ws {
		lane := w.Lane
		if lane == "" {
			lane = tunnel.DefaultLane
		}
		out = append(out, workerJSON{
			ID: w.ID, Live: w.Live, Host: w.Host, PID: w.PID, Lane: lane, Shards: w.Shards,
			Schema: w.Schema, Methods: w.Methods, LastBeat: w.LastBeat.UTC(),
		})
	}
	return out
}

func printHealth(out io.Writer, h admin.Health) {
	if !h.Serving() {
		fmt.Fprintf(out, "%s: NOT SERVING (no worker has beaten in the last 5s)\n", h.Service)
	} else {
		fmt.Fprintf(out, "%s: SERVING\n", h.Service)
	}
	for _, w := range h.Workers {
		state := "live"
		if !w.Live {
			state = "silent"
		}
		fmt.Fprintf(out, "  %-6s %-32s host %s pid %d, last beat %s ago\n",
			state, w.ID, w.Host, w.PID, time.Since(w.LastBeat).Round(100*time.Millisecond))
	}
}
