package main

// The load of rpr bench: the closed loop of callers, the warm-up and the
// measured phase, and waiting for an async run's requests to be processed.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/admin"
	ordersv1 "github.com/rprtunnel/rpr/gen/examples/orders/v1"
	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/tunnel"
)

// benchRun is one run's moving parts.
type benchRun struct {
	o        benchOptions
	embedded bool
	probe    redis.UniversalClient // INFO samples and queue polls
	polls    *redisinfo.Sent       // commands probe sent to poll the queue
	queue    *admin.Service        // the service, on probe, for --no-server queue polls
	service  string
	method   string
	newCall  func() func(context.Context) error
	orders   *benchOrders // the in-process Orders server (async), else nil
	served   <-chan error // the in-process server's Serve result
	progress *benchProgress
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
		if code := tunnel.CodeOf(err); code != tunnel.Unavailable {
			return failed(fmt.Errorf("the first call of %s failed, so bench measures nothing: %w", r.method, err))
		}
		if time.Now().After(deadline) {
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

	before, beforeErr := benchSampleRedis(ctx, r.probe, r.embedded)
	pollsBefore := r.polls.Commands()
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
	pollCommands := r.polls.Commands() - pollsBefore
	after, afterErr := benchSampleRedis(context.WithoutCancel(ctx), r.probe, r.embedded)

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
			st, err := r.queue.Stats(context.WithoutCancel(ctx))
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
