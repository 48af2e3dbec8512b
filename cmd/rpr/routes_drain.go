package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

func newRoutesDrainCommand() *cobra.Command {
	var rf redisFlags
	var to string
	var timeout time.Duration
	const usage = "rpr routes drain SERVICE LANE [--to LANE], e.g. rpr routes drain examples.greeter.v1.Greeter v2"
	cmd := &cobra.Command{
		Use:   "drain SERVICE LANE [--to LANE]",
		Short: "Move the requests queued in a lane to another lane",
		Long: `drain moves the requests queued in LANE of SERVICE, in every shard, to the
lane --to (default: the default lane), each in one atomic step, so that
the servers of that lane run them: use it for a lane that lost its route
and whose servers are gone. Requests its live servers are running stay
theirs ("left"); when it has no live server, those its dead servers had
taken move too, and are settled like those of a crashed worker (run again
only when the method is idempotent).

rpr routes set and rm do this by themselves for a lane they leave without
a route or server; drain is for doing it by hand.`,
		Example: `  rpr routes drain examples.greeter.v1.Greeter v2
  rpr routes drain examples.greeter.v1.Greeter canary --to v1`,
		Args:              usageArgs(2, 2, usage),
		ValidArgsFunction: completeDrainArgs(&rf),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkServiceName(args[0], usage); err != nil {
				return err
			}
			from := args[1]
			if err := admin.ValidateLane(from); err != nil {
				return badInput(fmt.Errorf("LANE: %w", err))
			}
			if err := admin.ValidateLane(to); err != nil {
				return badInput(fmt.Errorf("--to: %w", err))
			}
			if from == to {
				return badInput(fmt.Errorf("lane %s drained into itself: name another lane with --to, e.g. --to v1 (default: %s)", from, tunnel.DefaultLane))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			t, err := openRoutes(ctx, rf, args[0])
			if err != nil {
				return err
			}
			defer t.rdb.Close()
			lanes, err := t.svc.Lanes(ctx)
			if err != nil {
				return badInput(err)
			}
			errOut := cmd.ErrOrStderr()
			if st, _ := laneStatus(lanes, from); st.Routed {
				fmt.Fprintf(errOut, "warning: lane %s is still routed: clients keep sending calls to it; change the routes first (rpr routes set / rm)\n", from)
			}
			res, err := t.svc.Drain(ctx, from, to)
			if err != nil {
				return failed(err)
			}
			if res.Moved == 0 && res.Left == 0 {
				// Nothing there: perhaps a mistyped name.
				if err := requireService(ctx, t.a, rf.url, t.service); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: moved %d request%s from lane %s to lane %s; %d left",
				t.service, res.Moved, plural(int(res.Moved)), from, to, res.Left)
			if st, _ := laneStatus(lanes, from); res.Left > 0 && st.LiveWorkers > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), " (running on lane %s's %d live server%s, which finish them)", from, st.LiveWorkers, plural(st.LiveWorkers))
			}
			fmt.Fprintln(cmd.OutOrStdout())
			if st, _ := laneStatus(lanes, to); st.LiveWorkers == 0 && res.Moved > 0 {
				fmt.Fprintf(errOut, "warning: lane %s has no live server: the moved requests wait there until one runs them\n", to)
			}
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVar(&to, "to", tunnel.DefaultLane, "lane to move the requests to")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "give up on Redis after this long")
	return cmd
}
