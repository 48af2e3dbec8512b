package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	ordersv1 "github.com/rprtunnel/rpr/gen/examples/orders/v1"
	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/tunnel"
)

// benchExample is the command line every flag error points at.
const benchExample = "rpr bench --redis redis://127.0.0.1:6379/0 --concurrency 64 --duration 30s"

// benchMaxPayload keeps the request (payload plus a few bytes of protobuf
// framing) and the Greeter's answer ("Hello, " + name + "!") under the
// default 4 MiB message limit.
const benchMaxPayload = tunnel.DefaultMaxMessageBytes - 64

// benchDrainTimeout bounds the wait for an async run's requests to be
// processed after the last one was enqueued.
const benchDrainTimeout = 2 * time.Minute

// benchOptions are the flags of rpr bench.
type benchOptions struct {
	redisURL          string
	prefix            string
	concurrency       int
	duration          time.Duration
	requests          int64
	payload           int
	mode              string
	warmup            time.Duration
	noServer          bool
	serverConcurrency int
	output            string
	// target is the METHOD argument (pkg.Svc/Method), "" for the
	// examples; data is its request (-d: JSON, @file or -).
	target, data string

	// timeLimit is the measured phase's time bound: --duration when given
	// or when --requests is not, else none (the request count bounds it).
	timeLimit time.Duration
}

func newBenchCommand() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench [pkg.Service/Method]",
		Short: "Load a service through Redis and report calls/s, latency and cost per call",
		Long: `bench runs a closed-loop load: --concurrency callers each send a call,
wait for its answer and send the next, for --duration or until --requests
calls were made, whichever comes first (with only --requests, until that
many were made). A --warmup phase runs first and is not counted. Ctrl-C
stops the load early; the summary is still printed.

--mode unary calls examples.greeter.v1.Greeter/SayHello with a --payload
bytes long name. --mode async enqueues examples.orders.v1.Orders/ShipOrder
with a --payload bytes long address; latency is then the enqueue latency,
and "end to end" the time from the first enqueue until the server has
processed every request.

Given a METHOD, bench loads that method of servers already running
against --redis instead, as ghz does: the request is -d JSON (the
protobuf JSON mapping of its input message, as rpr call takes it; @file
or - for stdin; default {}), and the message types come from the schema
its servers published. A unary method is called, an async one enqueued
(bench then waits until the service's queue is empty).

Unless --no-server is given (or a METHOD), bench starts the service's server in this
process, next to the client, and both talk only through Redis. With
--no-server it drives the servers already running against --redis (for
--mode async it then waits until the service's queue is empty).

The summary: calls, errors by code, calls/s, latency p50/p90/p99/p99.9,
Redis commands per call (INFO commandstats, commands inside Lua scripts
included, INFO itself excluded; on a shared Redis other clients' commands
count too), CPU time per call of Redis (INFO cpu) and of this process
(getrusage: client and in-process server), and heap allocations per call
of this process (runtime.MemStats).

Without --redis (or $RPR_REDIS_URL), bench uses an embedded in-memory Redis (miniredis) in this
process: handy to try the command, useless as a measurement.`,
		Example: `  rpr bench --redis redis://127.0.0.1:6379/0
  rpr bench --redis redis://127.0.0.1:6379/0 --concurrency 128 --duration 30s --payload 1024
  rpr bench --redis redis://127.0.0.1:6379/0 --mode async --requests 100000
  rpr bench --redis redis://10.0.0.5:6379/0 --no-server -o json   # load deployed Greeter servers
  rpr bench --redis redis://10.0.0.5:6379/0 examples.greeter.v1.Greeter/SayHello -d '{"name":"Ada"}' -n 1000 -c 16`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return badInput(fmt.Errorf("rpr bench takes at most one METHOD (got %q); everything else is a flag, e.g. %s", strings.Join(args, " "), benchExample))
			}
			return nil
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			rf := redisFlags{url: o.redisURL, prefix: o.prefix}
			if rf.url == "" { // the embedded Redis has no services
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return completePatterns(&rf, true)(cmd, args, toComplete)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.target = args[0]
			}
			if err := o.validate(cmd.Flags().Changed); err != nil {
				return err
			}
			return runBench(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	// Flags that do not parse are bad input: exit status 2, with an example.
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return badInput(fmt.Errorf("%w (e.g. %s; see %s --help)", err, benchExample, c.CommandPath()))
	})
	f := cmd.Flags()
	registerEmbeddedRedis(cmd, &o.redisURL)
	registerPrefix(cmd, &o.prefix)
	f.IntVarP(&o.concurrency, "concurrency", "c", 16, "callers, each with one call in flight")
	f.DurationVarP(&o.duration, "duration", "z", 10*time.Second, "how long to load (after the warm-up)")
	f.StringVarP(&o.data, "data", "d", "", "with a METHOD: its request as JSON, @file or - (stdin); default {}")
	f.Int64VarP(&o.requests, "requests", "n", 0, "stop after this many calls (default: no count limit)")
	f.IntVar(&o.payload, "payload", 128, "request payload in bytes (the Greeter's name, the order's address)")
	f.StringVar(&o.mode, "mode", "unary", "unary (Greeter/SayHello) or async (Orders/ShipOrder)")
	f.DurationVar(&o.warmup, "warmup", time.Second, "load run first and not counted (0 for none)")
	f.BoolVar(&o.noServer, "no-server", false, "start no server; drive the servers already serving --redis")
	f.IntVar(&o.serverConcurrency, "server-concurrency", 0, "handlers the in-process server runs at once (default: max(64, --concurrency))")
	f.StringVarP(&o.output, "output", "o", "text", "text or json")
	return cmd
}

// validate checks the flags; every complaint is exit status 2 and names
// the flag with an example of a good value.
func (o *benchOptions) validate(changed func(flag string) bool) error {
	bad := func(format string, args ...any) error {
		return badInput(fmt.Errorf(format, args...))
	}
	switch {
	case o.concurrency < 1:
		return bad("--concurrency %d: want at least 1 caller, e.g. --concurrency 16", o.concurrency)
	case o.duration <= 0:
		return bad("--duration %v: want a positive duration, e.g. --duration 30s", o.duration)
	case changed("requests") && o.requests < 1:
		return bad("--requests %d: want at least 1 call, e.g. --requests 100000", o.requests)
	case o.payload < 1 || o.payload > benchMaxPayload:
		return bad("--payload %d: want 1 to %d bytes (the Greeter refuses an empty name), e.g. --payload 128", o.payload, benchMaxPayload)
	case o.mode != "unary" && o.mode != "async":
		return bad("--mode %q: want unary or async, e.g. --mode async", o.mode)
	case o.warmup < 0:
		return bad("--warmup %v: want 0 (none) or a positive duration, e.g. --warmup 2s", o.warmup)
	case o.serverConcurrency < 0:
		return bad("--server-concurrency %d: want at least 1 handler, e.g. --server-concurrency 128", o.serverConcurrency)
	case o.output != "text" && o.output != "json":
		return bad("-o %q: want text or json, e.g. -o json", o.output)
	case o.target == "" && changed("data"):
		return bad("-d/--data is the request of a METHOD, e.g. rpr bench pkg.Svc/Method -d '{\"id\": 1}'; the load's duration is -z/--duration, e.g. -z 30s")
	case o.target != "":
		if err := o.validateTarget(changed); err != nil {
			return err
		}
	case o.noServer && o.redisURL == "":
		return bad("--no-server drives servers already running against a Redis: name it, e.g. rpr bench --no-server --redis redis://10.0.0.5:6379/0")
	case o.noServer && changed("server-concurrency"):
		return bad("--server-concurrency sets the in-process server, which --no-server does not start; drop one of them")
	}
	o.timeLimit = o.duration
	if changed("requests") && !changed("duration") {
		o.timeLimit = 0
	}
	if o.serverConcurrency == 0 {
		o.serverConcurrency = max(64, o.concurrency)
	}
	return nil
}

func runBench(ctx context.Context, in io.Reader, out, errOut io.Writer, o benchOptions) error {
	r := &benchRun{o: o, embedded: o.redisURL == ""}
	redisURL, shown := o.redisURL, tunnel.RedactURL(o.redisURL)
	if r.embedded {
		mr, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("start the embedded Redis: %w", err)
		}
		defer mr.Close()
		redisURL, shown = "redis://"+mr.Addr()+"/0", "embedded"
		fmt.Fprintln(errOut, "rpr bench: WARNING: no --redis given: running against an embedded, in-memory Redis (miniredis) inside this process.")
		fmt.Fprintln(errOut, "rpr bench: its figures are NOT representative of a real redis-server; pass --redis redis://HOST:PORT/0 to measure.")
	}
	quiet := slog.New(slog.DiscardHandler)
	rf := redisFlags{url: redisURL, prefix: o.prefix}
	open := func() (redis.UniversalClient, error) { return rf.open(ctx) }
	var err error
	if r.probe, err = open(); err != nil {
		return err
	}
	defer r.probe.Close()
	r.polls = &redisinfo.Sent{}
	r.probe.AddHook(r.polls)

	// The server, unless one is already running somewhere.
	var srv *tunnel.Server
	if !o.noServer {
		serverRedis, err := open()
		if err != nil {
			return err
		}
		defer serverRedis.Close()
		srv, err = tunnel.NewServer(serverRedis, tunnel.ServerOptions{
			Concurrency: o.serverConcurrency,
			Prefix:      o.prefix,
			Logger:      quiet,
			// Every async request leaves its idempotency key behind for the
			// window; keep the litter on a real Redis short-lived.
			IdempotencyWindow: 10 * time.Minute,
		})
		if err != nil {
			return err
		}
	}
	clientRedis, err := open()
	if err != nil {
		return err
	}
	defer clientRedis.Close()
	client, err := tunnel.NewClient(clientRedis, tunnel.ClientOptions{Prefix: o.prefix, Logger: quiet})
	if err != nil {
		return err
	}
	defer client.Close()

	switch {
	case o.target != "":
		if err := r.loadTarget(ctx, in, client); err != nil {
			return err
		}
	case o.mode == "unary":
		r.service, r.method = greeterv1.Greeter_ServiceInfo.Name, greeterv1.Greeter_ServiceInfo.Name+"/SayHello"
		greeterClient := greeterv1.NewGreeterClient(client)
		name := strings.Repeat("x", o.payload)
		r.newCall = func() func(context.Context) error {
			req := &greeterv1.SayHelloRequest{Name: name}
			return func(ctx context.Context) error {
				_, err := greeterClient.SayHello(ctx, req)
				return err
			}
		}
		if srv != nil {
			greeterv1.RegisterGreeterServer(srv, greeter.Server{})
		}
	case o.mode == "async":
		r.service, r.method = ordersv1.Orders_ServiceInfo.Name, ordersv1.Orders_ServiceInfo.Name+"/ShipOrder"
		ordersClient := ordersv1.NewOrdersClient(client)
		address := strings.Repeat("x", o.payload)
		r.newCall = func() func(context.Context) error {
			req := &ordersv1.ShipOrderRequest{OrderId: "bench", Sku: "BENCH-1", Quantity: 1, Address: address}
			return func(ctx context.Context) error {
				_, err := ordersClient.ShipOrder(ctx, req)
				return err
			}
		}
		if srv != nil {
			r.orders = &benchOrders{}
			ordersv1.RegisterOrdersServer(srv, r.orders)
		}
	}
	r.queue = rf.handle(r.probe).Service(r.service)
	if srv != nil {
		// The server outlives an interrupt until the summary is taken.
		serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
		served := make(chan error, 1)
		go func() { served <- srv.Serve(serveCtx) }()
		r.served = served
		defer func() {
			stopServing()
			<-served
		}()
	}

	r.progress = newBenchProgress(errOut)
	if err := r.waitReady(ctx); err != nil {
		return err
	}
	sum, err := r.measure(ctx)
	if err != nil {
		return err
	}
	sum.Redis, sum.EmbeddedRedis = shown, r.embedded

	if o.output == "json" {
		if err := writeJSON(out, sum); err != nil {
			return err
		}
	} else {
		sum.writeText(out)
	}
	if sum.Calls > 0 && sum.OK == 0 {
		return fmt.Errorf("every call failed (%s): is a server of %s running against this Redis?", sum.errorText(), r.service)
	}
	return nil
}
