package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

	// timeLimit is the measured phase's time bound: --duration when given
	// or when --requests is not, else none (the request count bounds it).
	timeLimit time.Duration
}

func newBenchCommand() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench",
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

Unless --no-server is given, bench starts the service's server in this
process, next to the client, and both talk only through Redis. With
--no-server it drives the servers already running against --redis (for
--mode async it then waits until the service's queue is empty).

The summary: calls, errors by code, calls/s, latency p50/p90/p99/p99.9,
Redis commands per call (INFO commandstats, commands inside Lua scripts
included, INFO itself excluded; on a shared Redis other clients' commands
count too), CPU time per call of Redis (INFO cpu) and of this process
(getrusage: client and in-process server), and heap allocations per call
of this process (runtime.MemStats).

Without --redis, bench uses an embedded in-memory Redis (miniredis) in this
process: handy to try the command, useless as a measurement.`,
		Example: `  rpr bench --redis redis://127.0.0.1:6379/0
  rpr bench --redis redis://127.0.0.1:6379/0 --concurrency 128 --duration 30s --payload 1024
  rpr bench --redis redis://127.0.0.1:6379/0 --mode async --requests 100000
  rpr bench --redis redis://10.0.0.5:6379/0 --no-server -o json   # load deployed Greeter servers`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return exitError{code: 2, cause: fmt.Errorf("rpr bench takes no arguments (got %q); everything is a flag, e.g. %s", strings.Join(args, " "), benchExample)}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(cmd.Flags().Changed); err != nil {
				return err
			}
			return runBench(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	// Flags that do not parse are bad input: exit status 2, with an example.
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return exitError{code: 2, cause: fmt.Errorf("%w (e.g. %s; see %s --help)", err, benchExample, c.CommandPath())}
	})
	f := cmd.Flags()
	f.StringVar(&o.redisURL, "redis", "", "Redis URL (redis://, rediss://, a Cluster seed list redis://h1:p1,h2:p2, or redis+sentinel://h1:p1/master); default: an embedded in-memory Redis, not representative")
	f.StringVar(&o.prefix, "prefix", tunnel.DefaultPrefix, "key prefix the services use")
	f.IntVarP(&o.concurrency, "concurrency", "c", 16, "callers, each with one call in flight")
	f.DurationVarP(&o.duration, "duration", "d", 10*time.Second, "how long to load (after the warm-up)")
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
		return exitError{code: 2, cause: fmt.Errorf(format, args...)}
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

// benchSummary is what rpr bench reports; -o json prints it as is. Figures
// that cannot be had are null in JSON and "n/a" in text.
type benchSummary struct {
	Mode          string `json:"mode"`
	Method        string `json:"method"`
	Redis         string `json:"redis"`
	EmbeddedRedis bool   `json:"embedded_redis"`
	// Server is "in-process" or "existing" (--no-server).
	Server            string  `json:"server"`
	ServerConcurrency int     `json:"server_concurrency,omitempty"`
	Concurrency       int     `json:"concurrency"`
	PayloadBytes      int     `json:"payload_bytes"`
	WarmupSeconds     float64 `json:"warmup_seconds"`
	// Seconds is the measured phase: from the first call until the last
	// answer (for async: the last enqueue).
	Seconds float64 `json:"seconds"`
	// StoppedBy is "duration", "requests" or "interrupt".
	StoppedBy string `json:"stopped_by"`
	Calls     int64  `json:"calls"`
	OK        int64  `json:"ok"`
	// Errors counts failed calls by status code.
	Errors         map[string]int64 `json:"errors"`
	CallsPerSecond float64          `json:"calls_per_second"`
	// LatencyOf says what Latency measures: "call" (unary: until the
	// answer) or "enqueue" (async: until the request is in Redis).
	LatencyOf string       `json:"latency_of"`
	Latency   benchLatency `json:"latency_ms"`
	// EndToEnd is set for async runs.
	EndToEnd *benchEndToEnd `json:"end_to_end,omitempty"`
	// RedisCommandsPerCall: commands Redis executed (INFO commandstats,
	// INFO excluded) per call; on the embedded Redis its command counter.
	RedisCommandsPerCall *float64 `json:"redis_commands_per_call"`
	// RedisCPUMicrosPerCall: Redis's used_cpu_sys+used_cpu_user per call;
	// null for the embedded Redis, which runs inside this process.
	RedisCPUMicrosPerCall *float64 `json:"redis_cpu_us_per_call"`
	// ProcessCPUMicrosPerCall: this process's user+system CPU per call
	// (client, and the server unless --no-server).
	ProcessCPUMicrosPerCall float64 `json:"process_cpu_us_per_call"`
	// AllocsPerCall: heap allocations of this process per call.
	AllocsPerCall float64  `json:"allocs_per_call"`
	Notes         []string `json:"notes,omitempty"`
}

// benchLatency holds latency quantiles in milliseconds, from a histogram
// with under 2% relative error.
type benchLatency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// benchEndToEnd is how long an async run took until every request
// enqueued in it had been processed.
type benchEndToEnd struct {
	// Enqueued is the requests enqueued successfully in the measured phase.
	Enqueued int64 `json:"enqueued"`
	// Processed is how many of them the in-process server processed; null
	// with --no-server (the queue is watched instead).
	Processed *int64 `json:"processed"`
	// Complete reports whether all were processed before bench gave up
	// waiting (after 2 minutes, or at Ctrl-C).
	Complete bool `json:"complete"`
	// Seconds runs from the first enqueue until the last was processed;
	// PerSecond is Enqueued over it. Both null when not Complete.
	Seconds   *float64 `json:"seconds"`
	PerSecond *float64 `json:"per_second"`
}

// benchRun is one run's moving parts.
type benchRun struct {
	o        benchOptions
	embedded bool
	admin    redis.UniversalClient // INFO samples and queue polls
	polls    *benchCommandCounter  // commands admin sent to poll the queue
	service  string
	method   string
	newCall  func() func(context.Context) error
	orders   *benchOrders // the in-process Orders server (async), else nil
	served   <-chan error // the in-process server's Serve result
	progress *benchProgress
}

func runBench(ctx context.Context, out, errOut io.Writer, o benchOptions) error {
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
	if r.admin, err = open(); err != nil {
		return err
	}
	defer r.admin.Close()
	r.polls = &benchCommandCounter{}
	r.admin.AddHook(r.polls)

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

	switch o.mode {
	case "unary":
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
	case "async":
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

// waitReady makes calls until one goes through, so the measurement starts
// with a server that is up and a client that knows it.
func (r *benchRun) waitReady(ctx context.Context) error {
	call := r.newCall()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := call(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if tunnel.CodeOf(err) != tunnel.Unavailable || time.Now().After(deadline) {
			if r.o.noServer {
				return fmt.Errorf("no server of %s answers on this Redis (start one, or drop --no-server to run one in this process): %w", r.service, err)
			}
			return fmt.Errorf("the in-process server of %s does not answer: %w", r.service, err)
		}
		select {
		case err := <-r.served:
			return fmt.Errorf("the in-process server stopped: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if r.orders != nil {
		// The probe's order, processed: the server is reading its queue.
		if !r.drain(ctx, r.processed(), 1, 15*time.Second) {
			return fmt.Errorf("the in-process server of %s did not process a request within 15s", r.service)
		}
	}
	return nil
}

// measure runs the warm-up and the measured load and puts the summary
// together.
func (r *benchRun) measure(ctx context.Context) (*benchSummary, error) {
	o := r.o
	sum := &benchSummary{
		Mode: o.mode, Method: r.method, Server: "in-process", ServerConcurrency: o.serverConcurrency,
		Concurrency: o.concurrency, PayloadBytes: o.payload, WarmupSeconds: o.warmup.Seconds(),
		LatencyOf: "call", Errors: map[string]int64{},
	}
	if o.noServer {
		sum.Server, sum.ServerConcurrency = "existing", 0
	}
	if o.mode == "async" {
		sum.LatencyOf = "enqueue"
	}
	if o.warmup > 0 && ctx.Err() == nil {
		base := r.processed()
		warm := r.load(ctx, 0, o.warmup, "warm-up")
		// What the warm-up enqueued is processed before measuring starts.
		if o.mode == "async" && !r.drain(ctx, base, warm.ok, benchDrainTimeout) && ctx.Err() == nil {
			sum.Notes = append(sum.Notes, "the warm-up's requests were still being processed when the measurement started")
		}
	}

	before, beforeErr := benchSampleRedis(ctx, r.admin, r.embedded)
	pollsBefore := r.polls.commands.Load()
	cpuBefore := benchProcessCPU()
	var memBefore runtime.MemStats
	runtime.ReadMemStats(&memBefore)
	base := r.processed()

	res := r.load(ctx, o.requests, o.timeLimit, "")

	if o.mode == "async" {
		e2e := &benchEndToEnd{Enqueued: res.ok}
		// After Ctrl-C, a short grace: what is in Redis is worth finishing.
		drainCtx, timeout := ctx, benchDrainTimeout
		if ctx.Err() != nil {
			drainCtx, timeout = context.WithoutCancel(ctx), 5*time.Second
		}
		e2e.Complete = r.drain(drainCtx, base, res.ok, timeout)
		if r.orders != nil {
			n := r.orders.processed.Load() - base
			e2e.Processed = &n
		}
		if e2e.Complete {
			secs := time.Since(res.start).Seconds()
			rate := float64(res.ok) / secs
			e2e.Seconds, e2e.PerSecond = &secs, &rate
		} else {
			sum.Notes = append(sum.Notes, "not every request was processed when bench stopped waiting: no end-to-end figure")
		}
		sum.EndToEnd = e2e
	}

	var memAfter runtime.MemStats
	runtime.ReadMemStats(&memAfter)
	cpuAfter := benchProcessCPU()
	pollCommands := r.polls.commands.Load() - pollsBefore
	after, afterErr := benchSampleRedis(context.WithoutCancel(ctx), r.admin, r.embedded)

	sum.Seconds = res.elapsed.Seconds()
	sum.StoppedBy = res.stoppedBy
	sum.Calls, sum.OK = res.calls, res.ok
	for code, n := range res.errors {
		sum.Errors[code.String()] += n
	}
	if res.calls == 0 {
		sum.Notes = append(sum.Notes, "no call was made")
		return sum, nil
	}
	calls := float64(res.calls)
	sum.CallsPerSecond = calls / res.elapsed.Seconds()
	sum.Latency = res.hist.latency()
	sum.ProcessCPUMicrosPerCall = float64((cpuAfter - cpuBefore).Microseconds()) / calls
	sum.AllocsPerCall = float64(memAfter.Mallocs-memBefore.Mallocs) / calls
	if err := errors.Join(beforeErr, afterErr); err != nil {
		sum.Notes = append(sum.Notes, "no Redis figures: "+err.Error())
	} else {
		commands := after.commands - before.commands - pollCommands
		if r.embedded {
			commands-- // the closing INFO counts itself
		}
		perCall := float64(commands) / calls
		sum.RedisCommandsPerCall = &perCall
		if !r.embedded {
			cpu := (after.cpu - before.cpu) * 1e6 / calls
			sum.RedisCPUMicrosPerCall = &cpu
		}
	}
	if r.embedded {
		sum.Notes = append(sum.Notes, "embedded Redis: it runs in this process (its CPU and allocations count as rpr's) and is no guide to a real redis-server")
	}
	if !o.noServer {
		sum.Notes = append(sum.Notes, "this process ran the client and the server: its CPU and allocations are both sides'")
	}
	if sum.StoppedBy == "interrupt" {
		sum.Notes = append(sum.Notes, "interrupted (Ctrl-C): the figures cover the calls made until then")
	}
	return sum, nil
}

// processed returns how many requests the in-process Orders server has
// processed so far (0 without one).
func (r *benchRun) processed() int64 {
	if r.orders == nil {
		return 0
	}
	return r.orders.processed.Load()
}

// drain waits until want requests more than base have been processed: by
// the in-process server's count, or, with --no-server, until the service's
// queue (stream and retry set) is empty. It reports false if that did not
// happen within timeout or before ctx ended.
func (r *benchRun) drain(ctx context.Context, base, want int64, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if r.orders != nil {
			if r.orders.processed.Load()-base >= want {
				return true
			}
		} else {
			st, err := tunnel.InspectService(context.WithoutCancel(ctx), r.admin, r.o.prefix, r.service)
			if err == nil && st.Length == 0 && st.Retrying == 0 {
				return true
			}
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return false
		}
		wait := time.Millisecond
		if r.orders == nil {
			wait = 20 * time.Millisecond
		}
		time.Sleep(wait)
	}
}

// benchResult is one load phase's outcome.
type benchResult struct {
	start     time.Time
	elapsed   time.Duration
	calls, ok int64
	errors    map[tunnel.Code]int64
	hist      benchHistogram
	stoppedBy string
}

// load runs the closed loop: o.concurrency callers, each making one call
// after the other, until limit calls were made (0: no limit), timeLimit
// passed (0: none) or ctx ended. Calls in flight then finish: they run on
// a context an interrupt does not cancel, with their method's deadline.
func (r *benchRun) load(ctx context.Context, limit int64, timeLimit time.Duration, phase string) benchResult {
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if timeLimit > 0 {
		runCtx, cancel = context.WithTimeout(ctx, timeLimit)
	}
	defer cancel()
	callCtx := context.WithoutCancel(ctx)
	type worker struct {
		hist   benchHistogram
		errors map[tunnel.Code]int64
	}
	workers := make([]worker, r.o.concurrency)
	var issued atomic.Int64
	r.progress.start(phase, limit, timeLimit)
	res := benchResult{start: time.Now(), errors: map[tunnel.Code]int64{}}
	var wg sync.WaitGroup
	for i := range workers {
		w := &workers[i]
		w.errors = map[tunnel.Code]int64{}
		call := r.newCall()
		wg.Go(func() {
			for runCtx.Err() == nil {
				if limit > 0 && issued.Add(1) > limit {
					return
				}
				t0 := time.Now()
				err := call(callCtx)
				w.hist.record(time.Since(t0))
				failed := err != nil
				if failed {
					w.errors[tunnel.CodeOf(err)]++
				}
				r.progress.done(failed)
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(res.start)
	r.progress.stop()
	for i := range workers {
		res.hist.merge(&workers[i].hist)
		for code, n := range workers[i].errors {
			res.errors[code] += n
		}
	}
	res.calls = res.hist.count
	res.ok = res.calls
	for _, n := range res.errors {
		res.ok -= n
	}
	switch {
	case ctx.Err() != nil:
		res.stoppedBy = "interrupt"
	case limit > 0 && issued.Load() > limit:
		res.stoppedBy = "requests"
	default:
		res.stoppedBy = "duration"
	}
	return res
}

// benchOrders is the Orders server of async runs: it ships nothing and
// counts what it processed.
type benchOrders struct {
	ordersv1.UnimplementedOrdersServer
	processed atomic.Int64
}

func (b *benchOrders) ShipOrder(context.Context, *ordersv1.ShipOrderRequest) error {
	b.processed.Add(1)
	return nil
}

// ---- progress ----

// benchProgress counts calls and, on a terminal, redraws one status line
// on stderr about once a second; elsewhere it prints one line per phase
// at its end.
type benchProgress struct {
	w        io.Writer
	terminal bool

	calls, errors atomic.Int64
	phase         string
	limit         int64
	timeLimit     time.Duration
	began         time.Time
	quit          chan struct{}
	finished      sync.WaitGroup
}

func newBenchProgress(w io.Writer) *benchProgress {
	return &benchProgress{w: w, terminal: isTerminal(w)}
}

func (p *benchProgress) done(failed bool) {
	p.calls.Add(1)
	if failed {
		p.errors.Add(1)
	}
}

func (p *benchProgress) start(phase string, limit int64, timeLimit time.Duration) {
	p.calls.Store(0)
	p.errors.Store(0)
	p.phase, p.limit, p.timeLimit, p.began = phase, limit, timeLimit, time.Now()
	if !p.terminal {
		return
	}
	p.quit = make(chan struct{})
	p.finished.Add(1)
	go func() {
		defer p.finished.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last, lastAt := int64(0), p.began
		fmt.Fprintf(p.w, "\r\033[K%s", p.line(0, 0))
		for {
			select {
			case <-p.quit:
				fmt.Fprint(p.w, "\r\033[K")
				return
			case now := <-tick.C:
				calls := p.calls.Load()
				rate := float64(calls-last) / now.Sub(lastAt).Seconds()
				last, lastAt = calls, now
				fmt.Fprintf(p.w, "\r\033[K%s", p.line(calls, rate))
			}
		}
	}()
}

func (p *benchProgress) stop() {
	if p.terminal {
		close(p.quit)
		p.finished.Wait()
		return
	}
	if p.phase != "" {
		return // a warm-up: only the measured phase gets its line
	}
	elapsed := time.Since(p.began)
	calls := p.calls.Load()
	fmt.Fprintf(p.w, "rpr bench: %s\n", p.line(calls, float64(calls)/elapsed.Seconds()))
}

// line is the status text: calls so far, calls/s, errors and time.
func (p *benchProgress) line(calls int64, rate float64) string {
	var b strings.Builder
	if p.phase != "" {
		b.WriteString(p.phase + ": ")
	}
	b.WriteString(benchGroup(calls))
	if p.limit > 0 {
		b.WriteString("/" + benchGroup(p.limit))
	}
	fmt.Fprintf(&b, " calls, %s calls/s, %s errors, %s", benchGroup(int64(math.Round(rate))), benchGroup(p.errors.Load()),
		time.Since(p.began).Round(100*time.Millisecond))
	if p.timeLimit > 0 {
		b.WriteString(" of " + p.timeLimit.String())
	}
	return b.String()
}

// ---- measurements ----

// benchRedisFigures is one sample of Redis's counters.
type benchRedisFigures struct {
	commands int64   // commands executed, INFO excluded
	cpu      float64 // seconds of CPU, user + system
}

// benchSampleRedis reads the commands Redis has executed (the sum of
// calls= over INFO commandstats, INFO's own line left out, so sampling
// does not count) and its CPU time (INFO cpu used_cpu_sys +
// used_cpu_user). A Cluster is summed over its masters. The embedded Redis
// has neither: its total_commands_processed (INFO stats) stands in for the
// commands and its CPU is not known.
func benchSampleRedis(ctx context.Context, rdb redis.UniversalClient, embedded bool) (benchRedisFigures, error) {
	if embedded {
		info, err := rdb.Info(ctx, "stats").Result()
		if err != nil {
			return benchRedisFigures{}, fmt.Errorf("INFO stats: %w", err)
		}
		n, _ := strconv.ParseInt(redisinfo.Field(info, "total_commands_processed"), 10, 64)
		return benchRedisFigures{commands: n}, nil
	}
	one := func(ctx context.Context, c *redis.Client) (benchRedisFigures, error) {
		s, err := redisinfo.Read(ctx, c)
		return benchRedisFigures{commands: s.Commands, cpu: s.CPU.Seconds()}, err
	}
	switch c := rdb.(type) {
	case *redis.Client:
		return one(ctx, c)
	case *redis.ClusterClient:
		var mu sync.Mutex
		var total benchRedisFigures
		err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			f, err := one(ctx, node)
			mu.Lock()
			total.commands += f.commands
			total.cpu += f.cpu
			mu.Unlock()
			return err
		})
		return total, err
	}
	return benchRedisFigures{}, fmt.Errorf("cannot read INFO through a %T", rdb)
}

// benchCommandCounter is a go-redis hook counting the commands a
// connection sends (each command of a pipeline counts), so bench can take
// its own queue polls out of Redis's command count.
type benchCommandCounter struct{ commands atomic.Int64 }

func (c *benchCommandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *benchCommandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "info" {
			c.commands.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *benchCommandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.commands.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// benchHistogram is a log-linear latency histogram: each power of two of
// nanoseconds is split into 64 buckets, so a quantile is off by under 1.6%
// and recording allocates nothing.
type benchHistogram struct {
	buckets [benchBuckets]int64
	count   int64
	sum     time.Duration
	max     time.Duration
}

const (
	benchSubBits = 6
	benchBuckets = (64 - benchSubBits + 1) << benchSubBits
)

func benchBucket(ns int64) int {
	if ns < 1<<benchSubBits {
		return int(max(ns, 0))
	}
	k := bits.Len64(uint64(ns)) - 1
	sub := int(ns>>(k-benchSubBits)) & (1<<benchSubBits - 1)
	return (k-benchSubBits+1)<<benchSubBits + sub
}

// benchBucketMid returns the middle of bucket b, in nanoseconds.
func benchBucketMid(b int) float64 {
	if b < 1<<benchSubBits {
		return float64(b)
	}
	k := b>>benchSubBits + benchSubBits - 1
	sub := b & (1<<benchSubBits - 1)
	width := float64(uint64(1) << (k - benchSubBits))
	return float64(uint64(1)<<k) + float64(sub)*width + width/2
}

func (h *benchHistogram) record(d time.Duration) {
	h.buckets[benchBucket(int64(d))]++
	h.count++
	h.sum += d
	h.max = max(h.max, d)
}

func (h *benchHistogram) merge(o *benchHistogram) {
	for i, n := range o.buckets {
		h.buckets[i] += n
	}
	h.count += o.count
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile returns the q-quantile in nanoseconds (never above the maximum).
func (h *benchHistogram) quantile(q float64) float64 {
	if h.count == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.count)))
	rank = min(max(rank, 1), h.count)
	var seen int64
	for b, n := range h.buckets {
		seen += n
		if seen >= rank {
			return min(benchBucketMid(b), float64(h.max))
		}
	}
	return float64(h.max)
}

func (h *benchHistogram) latency() benchLatency {
	ms := func(ns float64) float64 { return ns / 1e6 }
	l := benchLatency{
		P50: ms(h.quantile(0.50)), P90: ms(h.quantile(0.90)), P99: ms(h.quantile(0.99)), P999: ms(h.quantile(0.999)),
		Max: ms(float64(h.max)),
	}
	if h.count > 0 {
		l.Mean = ms(float64(h.sum) / float64(h.count))
	}
	return l
}

// ---- text output ----

func (s *benchSummary) writeText(w io.Writer) {
	fmt.Fprintf(w, "rpr bench: %s %s via %s\n", s.Mode, s.Method, s.Redis)
	server := "in-process server (" + strconv.Itoa(s.ServerConcurrency) + " handlers)"
	if s.Server == "existing" {
		server = "existing servers"
	}
	fmt.Fprintf(w, "  %s, %d callers, %d B payload, %v warm-up; measured %.2fs, stopped by %s\n\n",
		server, s.Concurrency, s.PayloadBytes, time.Duration(s.WarmupSeconds*float64(time.Second)), s.Seconds, s.StoppedBy)
	row := func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-17s %s\n", label, fmt.Sprintf(format, args...))
	}
	row("calls", "%s", benchGroup(s.Calls))
	row("errors", "%s", s.errorText())
	row("calls/s", "%s", benchGroup(int64(math.Round(s.CallsPerSecond))))
	l := s.Latency
	label := "latency"
	if s.LatencyOf == "enqueue" {
		label = "enqueue latency"
	}
	row(label, "p50 %s ms   p90 %s ms   p99 %s ms   p99.9 %s ms   (max %s ms)",
		benchMs(l.P50), benchMs(l.P90), benchMs(l.P99), benchMs(l.P999), benchMs(l.Max))
	if e := s.EndToEnd; e != nil {
		if e.Complete {
			row("end to end", "%s processed %.2fs after the first enqueue (%s/s)", benchGroup(e.Enqueued), *e.Seconds, benchGroup(int64(math.Round(*e.PerSecond))))
		} else if e.Processed != nil {
			row("end to end", "n/a: %s of %s processed when bench stopped waiting", benchGroup(*e.Processed), benchGroup(e.Enqueued))
		} else {
			row("end to end", "n/a: the queue was not empty when bench stopped waiting")
		}
	}
	row("redis commands", "%s per call", benchPerCall(s.RedisCommandsPerCall, 2))
	who := "client"
	if s.Server == "in-process" {
		who = "client + server"
	}
	redisCPU := "n/a (embedded: runs in this process)"
	if s.RedisCPUMicrosPerCall != nil {
		redisCPU = benchPerCall(s.RedisCPUMicrosPerCall, 1) + " µs"
	}
	row("cpu per call", "redis %s   rpr process %s µs (%s)", redisCPU,
		strconv.FormatFloat(s.ProcessCPUMicrosPerCall, 'f', 1, 64), who)
	row("allocs per call", "%s (%s)", strconv.FormatFloat(s.AllocsPerCall, 'f', 1, 64), who)
	for _, n := range s.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// errorText is "0", or the count with the codes, most frequent first.
func (s *benchSummary) errorText() string {
	var total int64
	codes := make([]string, 0, len(s.Errors))
	for code, n := range s.Errors {
		total += n
		codes = append(codes, code)
	}
	if total == 0 {
		return "0"
	}
	slices.SortFunc(codes, func(a, b string) int {
		if s.Errors[a] != s.Errors[b] {
			return int(s.Errors[b] - s.Errors[a])
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(codes))
	for i, code := range codes {
		parts[i] = code + " " + benchGroup(s.Errors[code])
	}
	return benchGroup(total) + " (" + strings.Join(parts, ", ") + ")"
}

// benchPerCall formats an optional figure, "n/a" when there is none.
func benchPerCall(v *float64, decimals int) string {
	if v == nil {
		return "n/a"
	}
	return strconv.FormatFloat(*v, 'f', decimals, 64)
}

// benchMs formats milliseconds with about three significant digits.
func benchMs(v float64) string {
	decimals := 0
	switch {
	case v < 1:
		decimals = 3
	case v < 10:
		decimals = 2
	case v < 100:
		decimals = 1
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// benchGroup writes n with thousands separators: 1234567 -> 1,234,567.
func benchGroup(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
