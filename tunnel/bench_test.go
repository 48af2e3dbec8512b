package tunnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// BenchmarkUnaryEcho measures unary echo calls through a real redis-server
// at several concurrencies and reports calls/s, p50/p99 latency and Redis
// commands per call (from INFO commandstats).
//
//	go test -run '^$' -bench UnaryEcho -benchtime 20000x ./tunnel
func BenchmarkUnaryEcho(b *testing.B) {
	rs := redistest.Start(b)
	rdb := rs.Client(b)
	quiet := slog.New(slog.DiscardHandler)
	srv, err := tunnel.NewServer(rdb, tunnel.ServerOptions{Concurrency: 256, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	handlers := map[string]echoHandler{"Echo": func(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return in, nil
	}}
	srv.RegisterService(&echoDesc, handlers)
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() {
		stop()
		<-served
	}()
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	echo := method("Echo")
	for {
		if err := client.Invoke(ctx, echo, wrapperspb.String("warm"), new(wrapperspb.StringValue)); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	for _, concurrency := range []int{1, 16, 128} {
		b.Run(fmt.Sprintf("concurrency=%d", concurrency), func(b *testing.B) {
			latencies := make([]time.Duration, b.N)
			next := make(chan int, b.N)
			for i := range b.N {
				next <- i
			}
			close(next)
			before := commandCalls(b, rdb)
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for range concurrency {
				wg.Add(1)
				go func() {
					defer wg.Done()
					in := wrapperspb.String("hello")
					out := new(wrapperspb.StringValue)
					for i := range next {
						t0 := time.Now()
						if err := client.Invoke(ctx, echo, in, out); err != nil {
							b.Error(err)
							return
						}
						latencies[i] = time.Since(t0)
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			commands := commandCalls(b, rdb) - before - 1 // minus this INFO
			slices.Sort(latencies)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
			b.ReportMetric(ms(latencies[b.N/2]), "p50-ms")
			b.ReportMetric(ms(latencies[b.N*99/100]), "p99-ms")
			b.ReportMetric(float64(commands)/float64(b.N), "redis-cmds/call")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// commandCalls sums the calls of every command in INFO commandstats.
func commandCalls(b *testing.B, rdb redis.UniversalClient) int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		total += n
	}
	return total
}
