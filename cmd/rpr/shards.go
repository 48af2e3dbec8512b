package main

// rpr shards: read and change the number of shards recorded for a service,
// the count every client and server follows.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

func newShardsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shards",
		Short: "Show or change the number of shards of a service",
		Long: `shards reads and changes how many shards a service's queues are spread over:
hash tags {S} (shard 0) and {S#1} ... {S#N-1}, so that a Redis Cluster
spreads the service over its masters. The count recorded in Redis
(rpr:v1:{S}:shards) is the one clients and servers follow, within a second.

A process built with (rpr.v1.service).shards, or ClientOptions /
ServerOptions.Shards, above the recorded count raises it as it starts:
raising needs no command. Lowering is done with rpr shards set, which
refuses while a shard that would go still holds requests. See docs/operations.md,
"Changing the shard count", for the procedure.`,
		Example: `  rpr shards get examples.orders.v1.Orders
  rpr shards set examples.orders.v1.Orders 4`,
	}
	return commandGroup(cmd, "get or set",
		newShardsGetCommand(), newShardsSetCommand())
}

func newShardsGetCommand() *cobra.Command {
	var rf redisFlags
	var timeout time.Duration
	var output string
	const example = "rpr shards get examples.orders.v1.Orders"
	cmd := &cobra.Command{
		Use:               "get SERVICE",
		Short:             "Print the number of shards recorded for a service",
		Long:              `get prints the number of shards recorded for a service: 1 when none is recorded (the service is not sharded).`,
		Example:           "  " + example,
		Args:              usageArgs(1, 1, "rpr shards get SERVICE, e.g. "+example),
		ValidArgsFunction: completeServices(&rf, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkServiceName(args[0], example); err != nil {
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
			n, err := a.Service(args[0]).Shards(ctx)
			if err != nil {
				return badInput(err)
			}
			if n == 1 {
				// Not sharded, or not there: perhaps a mistyped name.
				if err := requireService(ctx, a, rf.url, args[0]); err != nil {
					return err
				}
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), struct {
					Service string `json:"service"`
					Shards  int    `json:"shards"`
				}{args[0], n})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d shard%s\n", args[0], n, plural(n))
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up on Redis after this long")
	return cmd
}

func newShardsSetCommand() *cobra.Command {
	var rf redisFlags
	var timeout time.Duration
	const usage = "rpr shards set SERVICE N, e.g. rpr shards set examples.orders.v1.Orders 4"
	cmd := &cobra.Command{
		Use:   "set SERVICE N",
		Short: "Change the number of shards of a service",
		Long: fmt.Sprintf(`set records N (1 to %d) as the number of shards of SERVICE; clients and
servers follow within a second.

Raising is always safe: the new shards start empty, and servers start
reading them within a second.

Lowering is refused, with exit status 1, while a shard that would go still
holds a request (queued, running, or an async request waiting for a retry
or its time, in any lane): let them drain and try again. Servers that are
running keep reading the removed shards until they stop, so what a client
sent just before the change is still served.

Either way, async requests with an idempotency key go to the shard their
key hashes to, so changing N moves keys to other shards, where a duplicate
of a request sent before the change is not recognised: change N when no
such duplicates can arrive any more (see docs/operations.md, "Changing the shard count").`, tunnel.MaxShards),
		Example: `  rpr shards set examples.orders.v1.Orders 4
  rpr shards set examples.orders.v1.Orders 1`,
		Args:              usageArgs(2, 2, usage),
		ValidArgsFunction: completeServices(&rf, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			service := args[0]
			if err := checkServiceName(service, usage); err != nil {
				return err
			}
			n, err := strconv.Atoi(strings.TrimSpace(args[1]))
			if err != nil || n < 1 || n > tunnel.MaxShards {
				//lint:ignore ST1005 N is the argument, named as the usage line names it
				return badInput(fmt.Errorf("N %q: want a whole number of shards from 1 to %d, e.g. %s %s 4", args[1], tunnel.MaxShards, "rpr shards set", service))
			}
			ctx, a, done, err := rf.connect(cmd, timeout)
			if err != nil {
				return err
			}
			defer done()
			svc := a.Service(service)
			current, err := svc.Shards(ctx)
			if err != nil {
				return badInput(err)
			}
			out := cmd.OutOrStdout()
			if n == current {
				fmt.Fprintf(out, "%s: already %d shard%s; nothing changed\n", service, n, plural(n))
				return nil
			}
			if err := svc.SetShards(ctx, n); err != nil {
				// The handle's refusal is the one error that is not
				// Redis failing: the change is possible later.
				if errors.Is(err, admin.ErrShardsHoldRequests) {
					return failed(fmt.Errorf("%s (nothing changed; see \"Changing the shard count\" in docs/operations.md)", strings.TrimPrefix(err.Error(), "rpr: ")))
				}
				return badInput(err)
			}
			fmt.Fprintf(out, "%s: %d -> %d shards; clients and servers follow within a second\n", service, current, n)
			if n > current {
				fmt.Fprintf(out, "  each server holds one more blocking read per added shard and lane it serves, each client one more per shard it gets answers from: check pool_size where a process serves or calls many services\n")
			} else {
				removed := fmt.Sprintf("shards %d-%d", n, current-1)
				if n == current-1 {
					removed = fmt.Sprintf("shard %d", n)
				}
				fmt.Fprintf(out, "  running servers keep reading %s until they stop; a process configured for more than %d shard%s ((rpr.v1.service).shards or the Shards options) raises the count again when it starts: deploy the lower setting too\n", removed, n, plural(n))
			}
			fmt.Fprintf(out, "  async requests with an idempotency key now map to other shards: a duplicate of one sent before the change may run again\n")
			if hint := unknownServiceHint(ctx, a, service); hint != "" {
				fmt.Fprintf(out, "note: %s\n", hint)
			}
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "give up on Redis after this long")
	return cmd
}
