package tunnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// BenchmarkUnaryEchoLarge echoes 64 KiB and 1 MiB strings at concurrency
// 8, client and server in this process, and reports the bytes allocated
// per call over the payload size: the copies of the payload the two
// sides make (bench/perf's goal 5 figure, in one process).
//
//	go test -run '^$' -bench UnaryEchoLarge -benchtime 2000x ./tunnel
func BenchmarkUnaryEchoLarge(b *testing.B) {
	rs := redistest.Start(b)
	rdb := rs.Client(b)
	quiet := slog.New(slog.DiscardHandler)
	startEchoServer(b, rdb, tunnel.ServerOptions{Concurrency: 64, Logger: quiet})
	client := echoClient(b, rdb)
	echo := method("Echo")
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("payload=%dKiB", size>>10), func(b *testing.B) {
			in := wrapperspb.String(strings.Repeat("x", size))
			next := make(chan struct{}, b.N)
			for range b.N {
				next <- struct{}{}
			}
			close(next)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range next {
						if err := client.Invoke(context.Background(), echo, in, new(wrapperspb.StringValue)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/float64(size), "B/payload")
			b.ReportMetric(float64(b.N)*float64(size)/1e6/b.Elapsed().Seconds(), "MB/s")
		})
	}
}
