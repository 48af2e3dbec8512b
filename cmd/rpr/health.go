package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
)

func newHealthCommand() *cobra.Command {
	var rf redisFlags
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health pkg.Service",
		Short: "Exit 0 when a live worker serves the service, 1 otherwise (for readiness probes)",
		Long: `health reads the service's worker heartbeats from Redis and prints each
worker with its last beat. It exits 0 when at least one worker is live
(beat within the last 5s), 1 when none is, and 2 when Redis cannot be read.`,
		Example: `  rpr health --redis redis://10.0.0.5:6379/0 examples.greeter.v1.Greeter`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, a, done, err := rf.connect(cmd, timeout)
			if err != nil {
				return err
			}
			defer done()
			h, err := a.Service(args[0]).Health(ctx)
			if err != nil {
				return badInput(err)
			}
			printHealth(cmd.OutOrStdout(), h)
			if !h.Serving() {
				return exitError{code: exitFailed}
			}
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up on Redis after this long")
	return cmd
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
