package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redisinfo"
)

// AsyncOptions configures RunAsync. Zero fields take the defaults named
// on each.
type AsyncOptions struct {
	// Tasks is how many tasks each system enqueues and processes in the
	// measured run (default 20,000).
	Tasks int
	// Producers is how many goroutines enqueue them, each one task after
	// the other (default 16).
	Producers int
	// Concurrency is the processing server's concurrency, the same on
	// both: rpr's ServerOptions.Concurrency and asynq's
	// Config.Concurrency (default 256).
	Concurrency int
	// Payload is the size of each task's payload in bytes, a marshalled
	// google.protobuf.BytesValue that both systems carry unchanged and
	// both handlers decode (default 32; 1 cannot be encoded).
	Payload int
	// Warmup is how many tasks each system enqueues and processes before
	// the measured run, not measured (default 100; -1 for none).
	Warmup int
	// Timeout bounds each system's whole run, start to stop (default 2
	// minutes).
	Timeout time.Duration
	// AsynqTaskCheckInterval is asynq's Config.TaskCheckInterval, how
	// long its dispatcher sleeps when it finds the queue empty; zero
	// leaves asynq's default (1s).
	AsynqTaskCheckInterval time.Duration
	// RedisServer is the redis-server binary (see StartRedis).
	RedisServer string
	// Profile, when set, is a path prefix: each system's measured tasks
	// are profiled (this process's CPU, server and producers alike) into
	// Profile + "." + the system's name + ".prof".
	Profile string
	// Log receives progress lines and the systems' own warnings; nil
	// discards them.
	Log io.Writer
}

func (o AsyncOptions) withDefaults() AsyncOptions {
	if o.Tasks == 0 {
		o.Tasks = 20000
	}
	if o.Producers == 0 {
		o.Producers = 16
	}
	if o.Concurrency == 0 {
		o.Concurrency = 256
	}
	if o.Payload == 0 {
		o.Payload = 32
	}
	switch o.Warmup {
	case 0:
		o.Warmup = 100
	case -1:
		o.Warmup = 0
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o
}

// AsyncSystemResult is one system's measured run.
type AsyncSystemResult struct {
	System string // "rpr" or "asynq"
	Tasks  int    // tasks enqueued and processed in the measured run
	// Elapsed is from the first enqueue until the handler had processed
	// the last of the Tasks; Enqueued until the last enqueue returned.
	Elapsed, Enqueued time.Duration
	P50, P99          time.Duration // exact enqueue latency quantiles
	// RedisCommands is what redis-server executed from just before the
	// first enqueue until the system had stopped after the last task
	// (INFO commandstats: commands inside Lua scripts included, INFO
	// left out), and RedisCPU its used_cpu_sys+used_cpu_user.
	RedisCommands int64
	RedisCPU      time.Duration
	// ProcessCPU is this process's user+system CPU over the same span
	// (the producers, the client and the processing server), -1 when it
	// cannot be had.
	ProcessCPU time.Duration
	// GoroutinesLeft is how many more goroutines ran after the system
	// was stopped than before it was started (0: every one stopped).
	GoroutinesLeft int
	RedisVersion   string // of the system's own redis-server
}

// PerSecond is the end-to-end throughput: tasks processed per second.
func (r AsyncSystemResult) PerSecond() float64 { return float64(r.Tasks) / r.Elapsed.Seconds() }

// EnqueuedPerSecond is the rate at which the producers enqueued them.
func (r AsyncSystemResult) EnqueuedPerSecond() float64 {
	return float64(r.Tasks) / r.Enqueued.Seconds()
}

// CommandsPerTask is RedisCommands per task.
func (r AsyncSystemResult) CommandsPerTask() float64 {
	return float64(r.RedisCommands) / float64(r.Tasks)
}

// PerTask returns d per task in microseconds, or -1 when d is -1.
func (r AsyncSystemResult) PerTask(d time.Duration) float64 {
	if d < 0 {
		return -1
	}
	return float64(d.Nanoseconds()) / 1e3 / float64(r.Tasks)
}

// AsyncResult is RunAsync's report: both systems measured in one run.
type AsyncResult struct {
	Options      AsyncOptions // as run, defaults filled in
	AsynqVersion string       // the asynq module this program was built with
	RPR, Asynq   AsyncSystemResult
}

// RunAsync measures rpr's async requests and asynq's tasks end to end, one
// system after the other, each against a redis-server of its own started
// for it and stopped after it (so neither's commands, CPU or leftover
// keys count in the other's figures): opts.Producers goroutines enqueue
// opts.Tasks tasks of opts.Payload bytes, and a processing server in this
// process, opts.Concurrency handlers wide, counts them; the time runs from
// the first enqueue until the count reaches opts.Tasks.
func RunAsync(ctx context.Context, opts AsyncOptions) (AsyncResult, error) {
	opts = opts.withDefaults()
	switch {
	case opts.Tasks < 1, opts.Producers < 1, opts.Concurrency < 1, opts.Warmup < 0, opts.Timeout < 0:
		return AsyncResult{}, fmt.Errorf("async comparison: tasks, producers and concurrency must be positive, warmup and timeout not negative: %+v", opts)
	}
	payload, err := bytesValueOfSize(opts.Payload)
	if err != nil {
		return AsyncResult{}, err
	}
	res := AsyncResult{Options: opts, AsynqVersion: moduleVersion("github.com/hibiken/asynq")}
	if res.RPR, err = runAsyncSystem(ctx, "rpr", startRPRAsync, payload, opts); err != nil {
		return res, err
	}
	if res.Asynq, err = runAsyncSystem(ctx, "asynq", startAsynq, payload, opts); err != nil {
		return res, err
	}
	return res, nil
}

// asyncSystem is one queue's client and processing server, both in this
// process, against one redis-server.
type asyncSystem interface {
	// Enqueue sends one task and returns once the system has it.
	Enqueue(ctx context.Context) error
	// Stopped is closed if the processing server stops by itself (it
	// failed); nil for a system whose server never does.
	Stopped() <-chan struct{}
	// Close stops the server and the client and returns once their
	// goroutines are done.
	Close() error
}

// asyncStarter starts a system whose handler decodes each task's payload
// and then calls counted.hit.
type asyncStarter func(ctx context.Context, redisURL string, counted *counter, payload []byte, opts AsyncOptions) (asyncSystem, error)

// counter counts processed tasks against a target and closes done when
// the count reaches it. One phase per target, swapped whole, so a late
// handler of the previous phase cannot count in the next.
type counter struct{ cur atomic.Pointer[phase] }

type phase struct {
	target int64
	n      atomic.Int64
	done   chan struct{}
}

// reset starts counting towards target and returns the phase's done.
func (c *counter) reset(target int) *phase {
	p := &phase{target: int64(target), done: make(chan struct{})}
	c.cur.Store(p)
	return p
}

// hit counts one processed task.
func (c *counter) hit() {
	if p := c.cur.Load(); p != nil && p.n.Add(1) == p.target {
		close(p.done)
	}
}

// wait returns once p's target is reached, or with an error when ctx ends
// or the system's server stops first.
func (p *phase) wait(ctx context.Context, sys asyncSystem) error {
	select {
	case <-p.done:
		return nil
	case <-sys.Stopped():
		return fmt.Errorf("%d of %d tasks processed when the server stopped early", p.n.Load(), p.target)
	case <-ctx.Done():
		return fmt.Errorf("%d of %d tasks processed when the run ended: %w", p.n.Load(), p.target, context.Cause(ctx))
	}
}

func runAsyncSystem(parent context.Context, name string, start asyncStarter, payload []byte, opts AsyncOptions) (AsyncSystemResult, error) {
	ctx, cancel := context.WithTimeoutCause(parent, opts.Timeout, fmt.Errorf("the %s run took over -timeout %v", name, opts.Timeout))
	defer cancel()
	rs, err := StartRedis(opts.RedisServer)
	if err != nil {
		return AsyncSystemResult{}, err
	}
	defer rs.Stop()
	admin := redis.NewClient(&redis.Options{Addr: rs.addr})
	defer admin.Close()

	goroutinesBefore := runtime.NumGoroutine()
	fmt.Fprintf(opts.Log, "%s: starting against redis-server %s ...\n", name, rs.Version)
	var counted counter
	sys, err := start(ctx, rs.URL(), &counted, payload, opts)
	if err != nil {
		return AsyncSystemResult{}, fmt.Errorf("%s: %w", name, err)
	}
	profilePath := ""
	if opts.Profile != "" {
		profilePath = opts.Profile + "." + name + ".prof"
	}
	r, err := measureAsync(ctx, sys, admin, &counted, opts, profilePath)
	if closeErr := sys.Close(); closeErr != nil {
		err = errors.Join(err, fmt.Errorf("stopping: %w", closeErr))
	}
	if err == nil {
		err = r.sampleAfter(ctx, admin)
	}
	if err != nil {
		return AsyncSystemResult{}, fmt.Errorf("%s: %w", name, err)
	}
	r.System, r.RedisVersion = name, rs.Version
	r.GoroutinesLeft = goroutinesLeft(ctx, goroutinesBefore)
	fmt.Fprintf(opts.Log, "%s: %d tasks in %v (%.0f/s)\n", name, r.Tasks, r.Elapsed.Round(time.Millisecond), r.PerSecond())
	return r.AsyncSystemResult, nil
}

// measured is a run between its start and its system's stop: the time is
// taken when the last task has been processed, the CPU and Redis figures
// once the system has stopped (sampleAfter), so that the completions of
// the last tasks, still in flight when the count was reached, count too.
type measured struct {
	AsyncSystemResult
	redisBefore redisinfo.Sample
	cpuBefore   time.Duration
}

// measureAsync runs the warm-up and then the measured run on sys, sampling
// INFO through admin, a client of sys's redis-server of its own, and
// profiles the measured run into profilePath when it is set.
func measureAsync(ctx context.Context, sys asyncSystem, admin redis.Cmdable, counted *counter, opts AsyncOptions, profilePath string) (measured, error) {
	if opts.Warmup > 0 {
		p := counted.reset(opts.Warmup)
		if _, err := produce(ctx, sys, opts.Warmup, opts.Producers); err != nil {
			return measured{}, fmt.Errorf("warm-up: %w", err)
		}
		if err := p.wait(ctx, sys); err != nil {
			return measured{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	p := counted.reset(opts.Tasks)
	runtime.GC()
	before, err := redisinfo.Read(ctx, admin)
	if err != nil {
		return measured{}, err
	}
	var prof profile
	if profilePath != "" {
		if err := prof.start(profilePath); err != nil {
			return measured{}, fmt.Errorf("profile: %w", err)
		}
		defer prof.stop()
	}
	cpuBefore := ProcessCPU()
	start := time.Now()
	latencies, err := produce(ctx, sys, opts.Tasks, opts.Producers)
	enqueued := time.Since(start)
	if err != nil {
		return measured{}, fmt.Errorf("enqueueing (%d of %d tasks processed by then): %w", p.n.Load(), p.target, err)
	}
	if err := p.wait(ctx, sys); err != nil {
		return measured{}, err
	}
	elapsed := time.Since(start)
	if err := prof.stop(); err != nil {
		return measured{}, fmt.Errorf("profile: %w", err)
	}
	slices.Sort(latencies)
	n := len(latencies)
	return measured{
		AsyncSystemResult: AsyncSystemResult{
			Tasks: opts.Tasks, Elapsed: elapsed, Enqueued: enqueued,
			P50: latencies[n/2], P99: latencies[min(n*99/100, n-1)],
			ProcessCPU: -1,
		},
		redisBefore: before, cpuBefore: cpuBefore,
	}, nil
}

// sampleAfter fills in the CPU and Redis figures, the system stopped.
func (m *measured) sampleAfter(ctx context.Context, admin redis.Cmdable) error {
	if cpu := ProcessCPU(); m.cpuBefore >= 0 && cpu >= 0 {
		m.ProcessCPU = cpu - m.cpuBefore
	}
	after, err := redisinfo.Read(ctx, admin)
	if err != nil {
		return err
	}
	used := after.Sub(m.redisBefore)
	m.RedisCommands, m.RedisCPU = used.Commands, used.CPU
	return nil
}

// produce enqueues n tasks from producers goroutines, each one after the
// other, and returns every enqueue's latency. The first failure stops all
// of them and is returned.
func produce(parent context.Context, sys asyncSystem, n, producers int) ([]time.Duration, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	latencies := make([]time.Duration, n)
	enqueue := func(ctx context.Context, _ int) error {
		err := sys.Enqueue(ctx)
		if err != nil {
			cancel() // a figure with errors in it is no figure
		}
		return err
	}
	if errs, err := ClosedLoop(ctx, producers, n, latencies, enqueue); err != nil {
		return nil, fmt.Errorf("enqueue (%d of %d failed): %w", errs, n, err)
	}
	return latencies, nil
}

// goroutinesLeft waits, a few seconds at most, for the goroutine count to
// fall back to before, and returns how many above it remain.
func goroutinesLeft(ctx context.Context, before int) int {
	deadline := time.Now().Add(3 * time.Second)
	for {
		left := runtime.NumGoroutine() - before
		if left <= 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return max(left, 0)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bytesValueOfSize returns a marshalled BytesValue of exactly size bytes.
func bytesValueOfSize(size int) ([]byte, error) {
	for n := size; n >= 0; n-- {
		value := make([]byte, n)
		for i := range value {
			value[i] = byte('a' + i%26)
		}
		if b, err := proto.Marshal(wrapperspb.Bytes(value)); err == nil && len(b) == size {
			return b, nil
		}
	}
	return nil, fmt.Errorf("no BytesValue marshals to exactly %d bytes: choose another payload size", size)
}

// decodeTask is what both handlers do with a task's payload: decode it as
// the BytesValue it is.
func decodeTask(b []byte) error {
	return proto.Unmarshal(b, new(wrapperspb.BytesValue))
}

// moduleVersion is the version of module path this program was built
// with, from its build information ("unknown" when it has none).
func moduleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == path {
				return m.Version
			}
		}
	}
	return "unknown"
}
