package tunnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// BenchmarkUnaryEchoRetention measures what ServerOptions.Retention costs
// Redis: unary echo calls, 16 at a time through a real redis-server, with
// retention off (the default) and at an hour, each on a Redis of its own.
// It reports Redis commands per call (INFO commandstats, commands inside
// scripts included), Redis CPU per call, calls/s and the growth of INFO
// used_memory per call: with retention on, that growth is the retained
// records (nothing expires during the run).
//
//	go test -run '^$' -bench UnaryEchoRetention -benchtime 20000x ./tunnel
func BenchmarkUnaryEchoRetention(b *testing.B) {
	for _, retention := range []time.Duration{0, time.Hour} {
		b.Run(fmt.Sprintf("retention=%v", retention), func(b *testing.B) {
			rs := redistest.Start(b)
			rdb := rs.Client(b)
			quiet := slog.New(slog.DiscardHandler)
			startEchoServer(b, rdb, tunnel.ServerOptions{Concurrency: 256, Logger: quiet, Retention: retention})
			client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			ctx := context.Background()
			echo := method("Echo")
			waitAnswered(b, client, echo)
			in := wrapperspb.String("hello")
			next := make(chan struct{}, b.N)
			for range b.N {
				next <- struct{}{}
			}
			close(next)
			before := redisSample(b, rdb)
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for range next {
						if err := client.Invoke(ctx, echo, in, new(wrapperspb.StringValue)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			used := redisSample(b, rdb).Sub(before)
			b.ReportMetric(float64(used.Commands)/float64(b.N), "redis-ops/call")
			b.ReportMetric(float64(used.CPU.Microseconds())/float64(b.N), "redis-cpu-µs/call")
			b.ReportMetric(float64(used.UsedMemory)/float64(b.N), "redis-bytes/call")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
