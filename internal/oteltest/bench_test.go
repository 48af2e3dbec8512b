package oteltest_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// BenchmarkUnaryEcho measures unary echo calls through a real redis-server
// at several concurrencies, with no telemetry providers (the OTel global
// no-ops): tunnel's BenchmarkUnaryEcho, here so that BenchmarkUnaryEchoTraced
// and BenchmarkUnaryEchoMetered have their baseline in the same run:
//
//	go test -run '^$' -bench UnaryEcho -benchtime 20000x ./internal/oteltest
func BenchmarkUnaryEcho(b *testing.B) { benchmarkEcho(b, nil, nil) }

// BenchmarkUnaryEchoTraced is BenchmarkUnaryEcho with tracing on: every
// call sampled, spans batched to an exporter that drops them. Compare the
// two in one run to see what tracing costs.
func BenchmarkUnaryEchoTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer tp.Shutdown(context.Background())
	benchmarkEcho(b, tp, nil)
}

// BenchmarkUnaryEchoMetered is BenchmarkUnaryEcho with the metrics SDK
// recording every instrument (read by a manual reader, as a Prometheus
// scrape would).
func BenchmarkUnaryEchoMetered(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	benchmarkEcho(b, nil, mp)
}

// BenchmarkTracingNoop measures what telemetry adds to one unary call,
// made one at a time: with no providers configured (the otel global
// defaults: spans and measurements are no-ops) and, for comparison, with
// the tracing SDK sampling every call or the metrics SDK recording every
// instrument. The difference between the sub-benchmarks' ns/op and
// allocs/op is what the telemetry of a call costs on both sides.
func BenchmarkTracingNoop(b *testing.B) {
	b.Run("global", func(b *testing.B) { benchmarkSerialEcho(b, nil, nil) })
	b.Run("sdk-trace", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		defer tp.Shutdown(context.Background())
		benchmarkSerialEcho(b, tp, nil)
	})
	b.Run("sdk-metric", func(b *testing.B) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		defer mp.Shutdown(context.Background())
		benchmarkSerialEcho(b, nil, mp)
	})
}

// echoClient starts a server of the echo service's Echo method on a real
// redis-server and returns a client of it, both with the given providers,
// once a call has gone through.
func echoClient(b *testing.B, tp trace.TracerProvider, mp metric.MeterProvider) (*tunnel.Client, redis.UniversalClient, *redisinfo.Sent) {
	rs := redistest.Start(b)
	rdb := rs.Client(b)
	sent := &redisinfo.Sent{}
	rdb.AddHook(sent)
	quiet := slog.New(slog.DiscardHandler)
	startServer(b, rdb, tunnel.ServerOptions{Concurrency: 256, Logger: quiet, TracerProvider: tp, MeterProvider: mp}, func(s *tunnel.Server) {
		s.RegisterService(&echoDesc, map[string]echoHandler{"Echo": func(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return in, nil
		}})
	})
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: quiet, TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = client.Close() })
	waitFor(b, "a call of Echo to succeed", func() bool {
		return client.Invoke(context.Background(), method("Echo"), wrapperspb.String("warm"), new(wrapperspb.StringValue)) == nil
	})
	return client, rdb, sent
}

func benchmarkEcho(b *testing.B, tp trace.TracerProvider, mp metric.MeterProvider) {
	client, rdb, sent := echoClient(b, tp, mp)
	ctx, echo, in := context.Background(), method("Echo"), wrapperspb.String("hello")
	runConcurrent(b, func() error {
		return client.Invoke(ctx, echo, in, new(wrapperspb.StringValue))
	}, func() redisinfo.Sample { return redisSample(b, rdb) }, sent)
}

func benchmarkSerialEcho(b *testing.B, tp trace.TracerProvider, mp metric.MeterProvider) {
	client, _, _ := echoClient(b, tp, mp)
	ctx, echo, in := context.Background(), method("Echo"), wrapperspb.String("hello")
	b.ReportAllocs()
	for b.Loop() {
		if err := client.Invoke(ctx, echo, in, new(wrapperspb.StringValue)); err != nil {
			b.Fatal(err)
		}
	}
}

// runConcurrent runs call b.N times at concurrency 1, 16 and 128 and
// reports calls/s, p50/p99 latency, this process's CPU per call
// (user+system, getrusage; client and server both run here), what Redis
// executed per call and its CPU per call (from redis), and what the code
// under test sent per call (from sent): cmds/call (a script call counts
// once) and roundtrips/call (a pipeline counts once). The figures are
// those of tunnel's benchmarks, so the two modules' runs compare.
func runConcurrent(b *testing.B, call func() error, redis func() redisinfo.Sample, sent *redisinfo.Sent) {
	for _, concurrency := range []int{1, 16, 128} {
		b.Run(fmt.Sprintf("concurrency=%d", concurrency), func(b *testing.B) {
			latencies := make([]time.Duration, b.N)
			next := make(chan int, b.N)
			for i := range b.N {
				next <- i
			}
			close(next)
			before := redis()
			cpuBefore := processCPU(b)
			sentBefore, tripsBefore := sent.Commands(), sent.RoundTrips()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for range concurrency {
				wg.Go(func() {
					for i := range next {
						t0 := time.Now()
						if err := call(); err != nil {
							b.Error(err)
							return
						}
						latencies[i] = time.Since(t0)
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			cpu := processCPU(b) - cpuBefore
			b.StopTimer()
			used := redis().Sub(before)
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/call")
			b.ReportMetric(float64(sent.Commands()-sentBefore)/float64(b.N), "cmds/call")
			b.ReportMetric(float64(sent.RoundTrips()-tripsBefore)/float64(b.N), "roundtrips/call")
			b.ReportMetric(float64(used.Commands)/float64(b.N), "redis-ops/call")
			b.ReportMetric(float64(used.CPU.Microseconds())/float64(b.N), "redis-cpu-µs/call")
			slices.Sort(latencies)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
			b.ReportMetric(ms(latencies[b.N/2]), "p50-ms")
			b.ReportMetric(ms(latencies[b.N*99/100]), "p99-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// processCPU returns the CPU time (user+system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// redisSample reads Redis's counters (commands, CPU, memory).
func redisSample(b *testing.B, rdb redis.UniversalClient) redisinfo.Sample {
	s, err := redisinfo.Read(context.Background(), rdb)
	if err != nil {
		b.Fatal(err)
	}
	return s
}
