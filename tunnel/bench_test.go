package tunnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// BenchmarkUnaryEcho measures unary echo calls through a real redis-server
// at several concurrencies and reports calls/s, p50/p99 latency and Redis
// commands per call (from INFO commandstats).
//
//	go test -run '^$' -bench UnaryEcho -benchtime 20000x ./tunnel
//
// With RPR_BENCH_COMMANDSTATS=1 (and -v) it also logs Redis's per-command
// statistics and CPU time, to see where Redis spends its time.
//
// The same benchmark with the tracing and the metrics SDK on
// (BenchmarkUnaryEchoTraced, BenchmarkUnaryEchoMetered) is in module
// github.com/rprtunnel/rpr/internal/oteltest, which, unlike the runtime's
// module, may require the SDK; it runs its own BenchmarkUnaryEcho as their
// baseline.
func BenchmarkUnaryEcho(b *testing.B) {
	rs := redistest.Start(b)
	rdb := rs.Client(b)
	sent := &redisinfo.Sent{}
	rdb.AddHook(sent)
	quiet := slog.New(slog.DiscardHandler)
	startEchoServer(b, rdb, tunnel.ServerOptions{Concurrency: 256, Logger: quiet})
	client := echoClient(b, rdb)
	ctx := context.Background()
	echo := method("Echo")

	in := wrapperspb.String("hello")
	runConcurrent(b, func() error {
		return client.Invoke(ctx, echo, in, new(wrapperspb.StringValue))
	}, func() redisinfo.Sample { return redisSample(b, rdb) }, sent)
	if os.Getenv("RPR_BENCH_COMMANDSTATS") != "" {
		for _, l := range strings.Split(rdb.Info(ctx, "commandstats", "cpu").Val(), "\n") {
			if strings.HasPrefix(l, "cmdstat_") || strings.HasPrefix(l, "used_cpu_user_main") {
				b.Log(strings.TrimSpace(l))
			}
		}
	}
}

// startEchoServer serves the echo service's Echo method, answering with
// the request, until the test ends or stop is called.
func startEchoServer(tb testing.TB, rdb redis.UniversalClient, opts tunnel.ServerOptions) (stop func()) {
	_, stop = startServer(tb, rdb, opts, func(s *tunnel.Server) {
		s.RegisterService(&echoDesc, map[string]echoHandler{"Echo": func(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return in, nil
		}})
	})
	return stop
}

// echoClient opens a client on rdb, its logs discarded and closed when
// the test ends, and waits until the echo server answers it.
func echoClient(tb testing.TB, rdb redis.UniversalClient) *tunnel.Client {
	tb.Helper()
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = client.Close() })
	waitAnswered(tb, client, method("Echo"))
	return client
}

// waitAnswered waits until a call of m through client succeeds: the
// server is live and the client's connections and scripts are warm.
func waitAnswered(tb testing.TB, client *tunnel.Client, m *tunnel.MethodDesc) {
	tb.Helper()
	waitFor(tb, "a call of "+m.FullMethod()+" to succeed", func() bool {
		return client.Invoke(context.Background(), m, wrapperspb.String("warm"), new(wrapperspb.StringValue)) == nil
	})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// commandCalls returns the commands Redis has executed, INFO left out.
func commandCalls(b *testing.B, rdb redis.UniversalClient) int64 {
	return redisSample(b, rdb).Commands
}

// redisSample reads Redis's counters (commands, CPU, memory).
func redisSample(b *testing.B, rdb redis.UniversalClient) redisinfo.Sample {
	s, err := redisinfo.Read(context.Background(), rdb)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkUnaryEchoClients spreads 128 concurrent callers over 1, 4 and 16
// Client instances, each on its own Redis connection pool as separate
// processes would be, and reports Redis operations per call: what more
// client instances cost Redis (each has its own response stream, reader
// and refresh).
//
//	go test -run '^$' -bench UnaryEchoClients -benchtime 20000x ./tunnel
func BenchmarkUnaryEchoClients(b *testing.B) {
	rs := redistest.Start(b)
	rdb := rs.Client(b)
	quiet := slog.New(slog.DiscardHandler)
	startEchoServer(b, rdb, tunnel.ServerOptions{Concurrency: 256, Logger: quiet})
	ctx := context.Background()
	echo := method("Echo")
	in := wrapperspb.String("hello")
	const callers = 128
	for _, instances := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("clients=%d", instances), func(b *testing.B) {
			clients := make([]*tunnel.Client, instances)
			for i := range clients {
				c, err := tunnel.NewClient(rs.Client(b), tunnel.ClientOptions{Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				waitAnswered(b, c, echo)
				clients[i] = c
			}
			next := make(chan struct{}, b.N)
			for range b.N {
				next <- struct{}{}
			}
			close(next)
			before := commandCalls(b, rdb)
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for g := range callers {
				c := clients[g%instances]
				wg.Go(func() {
					for range next {
						if err := c.Invoke(ctx, echo, in, new(wrapperspb.StringValue)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(commandCalls(b, rdb)-before)/float64(b.N), "redis-ops/call")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
