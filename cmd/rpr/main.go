// Command rpr is the operator's tool for rpr tunnels. `rpr demo` shows a
// call crossing Redis in one process; later commands inspect and operate
// live services.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/tunnel"
)

func main() {
	redis.SetLogger(redisLog{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if code := reportError(os.Stderr, err); code != 0 {
		os.Exit(code)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "rpr",
		Short: "RPC across isolated networks through Redis",
		Long: `rpr carries gRPC-style calls between two networks that cannot reach each
other but can both reach one Redis. Services are defined in .proto files;
buf generate produces a client and a server; calls travel over Redis Streams.

Start with "rpr demo".

Every command that reads or changes a deployment takes --redis, default
$RPR_REDIS_URL (else redis://127.0.0.1:6379/0; demo and bench run an
embedded Redis instead), and --prefix, default $RPR_PREFIX (else rpr:v1:).

Exit status, the same for every command: 0 done; 1 the operation failed
(a failed call, no live worker, an unknown service or id, a refused
change); 2 usage or connection error (an unknown command or flag, wrong
arguments, a Redis rpr cannot reach or read).`,
		Version:       tunnel.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newDemoCommand(),
		newHealthCommand(),
		newLsCommand(),
		newDescribeCommand(),
		newCallCommand(),
		newStatsCommand(),
		newTopCommand(),
		newTraceCommand(),
		newDlqCommand(),
		newBenchCommand(),
		newLimitsCommand(),
		newRoutesCommand(),
		newShardsCommand(),
		newExporterCommand(),
		newForgetCommand(),
		newACLCommand(),
		newUpstreamsCommand(),
		newIngressCommand(),
		newEgressCommand(),
		newVersionCommand(),
		newKeysCommand(),
	)
	root.SetVersionTemplate("rpr {{.Version}}\n")
	root.InitDefaultCompletionCmd()
	strictUsage(root)
	return root
}

// redisLog sends go-redis's own log lines (reconnects, a Sentinel's new
// master) to slog at debug level, so that they do not interleave with a
// short command's output: the command reports a failure itself.
// Long-running commands (rpr egress, rpr ingress) install
// tunnel.RedisLogger instead.
type redisLog struct{}

func (redisLog) Printf(ctx context.Context, format string, v ...any) {
	slog.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}
