package tunnel_test

import (
	"context"
	"fmt"
	"net"
	"net/rpc"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/internal/redistest"
)

// Baselines for BenchmarkUnaryEcho, run on the same machine in the same
// `go test -bench` invocation so that figures can be reported as ratios:
//
//   - BenchmarkBaselineDirectTCP: net/rpc echo over a direct loopback TCP
//     connection (what a tunnel through Redis is compared with);
//   - BenchmarkBaselineRedisPing: one Redis round trip per call, the floor
//     for anything that goes through Redis.
func BenchmarkBaselineDirectTCP(b *testing.B) {
	srv := rpc.NewServer()
	if err := srv.Register(new(EchoRPC)); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go srv.Accept(ln)
	client, err := rpc.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	runConcurrent(b, func() error {
		var out string
		return client.Call("EchoRPC.Echo", "hello", &out)
	}, nil, nil)
}

func BenchmarkBaselineRedisPing(b *testing.B) {
	rdb := redistest.Start(b).Client(b)
	runConcurrent(b, func() error { return rdb.Ping(context.Background()).Err() }, nil, nil)
}

// processCPU returns the CPU time (user+system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// EchoRPC is the net/rpc echo service of BenchmarkBaselineDirectTCP.
type EchoRPC struct{}

// Echo returns its input.
func (EchoRPC) Echo(in string, out *string) error {
	*out = in
	return nil
}

// runConcurrent runs call b.N times at concurrency 1, 16 and 128 and reports
// calls/s, p50/p99 latency and this process's CPU per call (user+system,
// getrusage; client and server when both run here). When redis is set, it
// also reports redis-ops/call, everything Redis executed (commands inside
// Lua scripts included, its own INFO left out), and Redis's CPU per call.
// When sent is set, it reports what the code under test sent per call:
// cmds/call (a script call counts once) and roundtrips/call (a pipeline
// counts once).
func runConcurrent(b *testing.B, call func() error, redis func() redisinfo.Sample, sent *redisinfo.Sent) {
	runConcurrentAt(b, []int{1, 16, 128}, call, redis, sent)
}

// runConcurrentAt is runConcurrent at the given concurrencies.
func runConcurrentAt(b *testing.B, levels []int, call func() error, redis func() redisinfo.Sample, sent *redisinfo.Sent) {
	for _, concurrency := range levels {
		b.Run(fmt.Sprintf("concurrency=%d", concurrency), func(b *testing.B) {
			latencies := make([]time.Duration, b.N)
			next := make(chan int, b.N)
			for i := range b.N {
				next <- i
			}
			close(next)
			var before redisinfo.Sample
			var sentBefore, tripsBefore int64
			if redis != nil {
				before = redis()
			}
			cpuBefore := processCPU(b)
			if sent != nil {
				sentBefore, tripsBefore = sent.Commands(), sent.RoundTrips()
			}
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for range concurrency {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range next {
						t0 := time.Now()
						if err := call(); err != nil {
							b.Error(err)
							return
						}
						latencies[i] = time.Since(t0)
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			cpu := processCPU(b) - cpuBefore
			b.StopTimer()
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/call")
			if sent != nil {
				b.ReportMetric(float64(sent.Commands()-sentBefore)/float64(b.N), "cmds/call")
				b.ReportMetric(float64(sent.RoundTrips()-tripsBefore)/float64(b.N), "roundtrips/call")
			}
			if redis != nil {
				used := redis().Sub(before)
				b.ReportMetric(float64(used.Commands)/float64(b.N), "redis-ops/call")
				b.ReportMetric(float64(used.CPU.Microseconds())/float64(b.N), "redis-cpu-µs/call")
			}
			slices.Sort(latencies)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
			b.ReportMetric(ms(latencies[b.N/2]), "p50-ms")
			b.ReportMetric(ms(latencies[b.N*99/100]), "p99-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}
