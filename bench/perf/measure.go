package main

// One measured run: a closed loop of echo calls against one system, with
// the CPU and allocations of both processes (this one, the callers; the
// server child) and the work of Redis.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/bench/internal/compare"
	"github.com/rprtunnel/rpr/internal/redisinfo"
)

// system is one side of a comparison, its callers in this process and its
// server in a child.
type system struct {
	name string
	// call makes one echo call for caller worker.
	call  func(ctx context.Context, worker int, in *wrapperspb.BytesValue) error
	child *compare.Child
	admin redis.UniversalClient // nil: the system uses no Redis
}

// figures are one run's totals.
type figures struct {
	calls             int
	elapsed, p50, p99 time.Duration
	// parentCPU is this process's CPU (the callers), childCPU the server
	// child's, redisTime redis-server's (0 without Redis).
	parentCPU, childCPU, redisTime time.Duration
	redisCmds                      int64
	// redisIO is how often Redis read from or wrote to a connection
	// (each round trip is at least one of each).
	redisIO        int64
	mallocs, bytes uint64 // allocations and bytes allocated, both processes
	// serverBytes and serverGCs are the server child's bytes allocated
	// and garbage collections: a small heap that allocates fast collects
	// often, and each collection costs the server CPU.
	serverBytes, serverGCs uint64
}

// measure makes warmup unmeasured calls, then calls measured ones, with
// concurrency callers in a closed loop, all within timeout. Any failed
// call fails the run: a figure with errors in it is no figure. With prof
// set, the measured calls are profiled: this process's CPU into
// prof.callers.prof, the server child's into prof.server.prof.
func measure(ctx context.Context, sys system, payload []byte, concurrency, calls, warmup int, timeout time.Duration, prof string) (figures, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	in := wrapperspb.Bytes(payload)
	call := func(ctx context.Context, w int) error { return sys.call(ctx, w, in) }
	if errs, err := compare.ClosedLoop(ctx, concurrency, warmup, nil, call); errs > 0 || err != nil {
		return figures{}, childDied(sys, loopError(sys.name+" warm-up", errs, warmup, err))
	}
	latencies := make([]time.Duration, calls)
	runtime.GC()

	var memBefore, memAfter runtime.MemStats
	var redisBefore, redisAfter redisinfo.Sample
	childBefore, err := sys.child.Stats(ctx)
	if err != nil {
		return figures{}, err
	}
	if sys.admin != nil {
		if redisBefore, err = redisinfo.Read(ctx, sys.admin); err != nil {
			return figures{}, err
		}
	}
	stopProfiles, err := startProfiles(ctx, sys.child, prof)
	if err != nil {
		return figures{}, err
	}
	runtime.ReadMemStats(&memBefore)
	cpuBefore := compare.ProcessCPU()
	start := time.Now()
	errs, firstErr := compare.ClosedLoop(ctx, concurrency, calls, latencies, call)
	elapsed := time.Since(start)
	cpuAfter := compare.ProcessCPU()
	runtime.ReadMemStats(&memAfter)
	if err := stopProfiles(); err != nil {
		return figures{}, err
	}
	if errs > 0 || firstErr != nil {
		return figures{}, childDied(sys, loopError(sys.name, errs, calls, firstErr))
	}
	childAfter, err := sys.child.Stats(ctx)
	if err != nil {
		return figures{}, err
	}
	if sys.admin != nil {
		if redisAfter, err = redisinfo.Read(ctx, sys.admin); err != nil {
			return figures{}, err
		}
	}
	if cpuBefore < 0 || cpuAfter < 0 {
		return figures{}, fmt.Errorf("this process's CPU cannot be read here (getrusage)")
	}
	slices.Sort(latencies)
	r := redisAfter.Sub(redisBefore)
	return figures{
		calls: calls, elapsed: elapsed,
		p50: latencies[calls/2], p99: latencies[min(calls*99/100, calls-1)],
		parentCPU: cpuAfter - cpuBefore, childCPU: childAfter.CPU - childBefore.CPU,
		redisTime: r.CPU, redisCmds: r.Commands, redisIO: r.Reads + r.Writes,
		mallocs:     memAfter.Mallocs - memBefore.Mallocs + childAfter.Mallocs - childBefore.Mallocs,
		bytes:       memAfter.TotalAlloc - memBefore.TotalAlloc + childAfter.TotalAlloc - childBefore.TotalAlloc,
		serverBytes: childAfter.TotalAlloc - childBefore.TotalAlloc,
		serverGCs:   childAfter.GCs - childBefore.GCs,
	}, nil
}

// startProfiles starts the CPU profiles of a measured run (see measure):
// none when prof is "". The function it returns stops them.
func startProfiles(ctx context.Context, child *compare.Child, prof string) (stop func() error, err error) {
	if prof == "" {
		return func() error { return nil }, nil
	}
	stopCallers, err := compare.StartProfile(prof + ".callers.prof")
	if err != nil {
		return nil, fmt.Errorf("profiling the callers: %w", err)
	}
	if err := child.Profile(ctx, prof+".server.prof"); err != nil {
		_ = stopCallers()
		return nil, err
	}
	return func() error {
		return errors.Join(stopCallers(), child.Unprofile(ctx))
	}, nil
}

// childDied adds to a failed run's error how the system's server child
// ended, when it is not running any more (or stops within two seconds).
func childDied(sys system, err error) error {
	if died := sys.child.Died(2 * time.Second); died != "" {
		return fmt.Errorf("%w; the %s server %s", err, sys.name, died)
	}
	return err
}

// loopError says why a closed loop of n calls failed.
func loopError(what string, errs, n int, err error) error {
	if errs == 0 {
		return fmt.Errorf("%s: stopped before its %d calls were made: %w", what, n, err)
	}
	return fmt.Errorf("%s: %d of %d calls failed, the first with: %w", what, errs, n, err)
}

func (f figures) µs(d time.Duration) float64 {
	return float64(d.Nanoseconds()) / 1e3 / float64(f.calls)
}

// goCPU is µs of Go CPU per call, both processes.
func (f figures) goCPU() float64    { return f.µs(f.parentCPU + f.childCPU) }
func (f figures) redisCPU() float64 { return f.µs(f.redisTime) }
func (f figures) totalCPU() float64 { return f.µs(f.parentCPU + f.childCPU + f.redisTime) }
func (f figures) cmds() float64     { return float64(f.redisCmds) / float64(f.calls) }
func (f figures) io() float64       { return float64(f.redisIO) / float64(f.calls) }
func (f figures) allocs() float64   { return float64(f.mallocs) / float64(f.calls) }
func (f figures) bytesPerCall() float64 {
	return float64(f.bytes) / float64(f.calls)
}
func (f figures) callsPerSec() float64 { return float64(f.calls) / f.elapsed.Seconds() }
func (f figures) p50ms() float64       { return float64(f.p50) / 1e6 }

// logLine prints one run's figures as the program goes.
func (f figures) log(w io.Writer, what string) {
	fmt.Fprintf(w, "  %-34s %8.0f calls/s  p50 %s p99 %s ms  Go CPU %s µs/call (callers %s + server %s)  Redis %s µs, %s cmds, %s reads+writes  %s allocs, %s B/call (server %s B, %d GCs)\n",
		what, f.callsPerSec(), compare.Millis(f.p50), compare.Millis(f.p99),
		compare.Num(f.goCPU()), compare.Num(f.µs(f.parentCPU)), compare.Num(f.µs(f.childCPU)),
		compare.Num(f.redisCPU()), compare.Num(f.cmds()), compare.Num(f.io()), compare.Num(f.allocs()), compare.Num(f.bytesPerCall()),
		compare.Num(float64(f.serverBytes)/float64(f.calls)), f.serverGCs)
}

// runs are the repeated runs of one configuration; each figure of the
// table is the median of its value over them.
type runs []figures

func (rs runs) med(of func(figures) float64) float64 {
	v := make([]float64, len(rs))
	for i, f := range rs {
		v[i] = of(f)
	}
	return median(v)
}

// median is the median of v (NaN for none); it sorts v.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
