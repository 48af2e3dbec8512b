package main

// rpr forget: remove what a service that no longer runs left in Redis.

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
)

func newForgetCommand() *cobra.Command {
	var rf redisFlags
	var purge bool
	cmd := &cobra.Command{
		Use:   "forget SERVICE",
		Short: "Remove a service that no longer runs from Redis and from rpr ls",
		Long: `forget removes what a service left in Redis after its last worker stopped:
its worker records, schemas, shard count, routes, limits, upstream tables and
empty streams, so rpr ls stops listing it (it also stops by itself 24h after
its last worker's heartbeat). It refuses while a worker of the service is
live. Request streams, retry sets and dead letters that still hold something
stay unless --purge: those requests would never run. Clients' response
streams stay; they expire a minute after their client.`,
		Example: `  rpr forget examples.greeter.v1.Greeter
  rpr forget --purge acme.old.v1.Legacy`,
		Args:              usageArgs(1, 1, "rpr forget SERVICE, e.g. rpr forget examples.greeter.v1.Greeter"),
		ValidArgsFunction: completeServices(&rf, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkServiceName(args[0], "rpr forget examples.greeter.v1.Greeter"); err != nil {
				return err
			}
			ctx, a, done, err := rf.connect(cmd, 30*time.Second)
			if err != nil {
				return err
			}
			defer done()
			res, err := a.Service(args[0]).Forget(ctx, admin.ForgetOptions{Purge: purge})
			if errors.Is(err, admin.ErrServiceLive) {
				return failed(err)
			}
			if err != nil {
				return badInput(err)
			}
			out := cmd.OutOrStdout()
			if len(res.Removed) == 0 && len(res.Kept) == 0 {
				// Nothing there: say so as every command does.
				if err := requireService(ctx, a, rf.url, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(out, "%s: nothing in Redis under prefix %q\n", args[0], rf.prefix)
				return nil
			}
			fmt.Fprintf(out, "%s: removed %s\n", args[0], count(len(res.Removed), "key"))
			for _, k := range res.Kept {
				fmt.Fprintf(out, "  kept %s: it holds requests or dead letters (rpr forget --purge removes them)\n", k)
			}
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().BoolVar(&purge, "purge", false, "also remove request streams, retry sets and dead letters that are not empty")
	return cmd
}
