package tunnel_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// BenchmarkIdleServices measures what services that get no traffic cost
// the one that does on the same server: unary echo calls from 64 callers
// to a server with Concurrency 64 that serves the echo service alone,
// then the same with two more services registered (an async one and a
// unary one) that nobody calls. Compare calls/s of the two in one run:
// idle services must cost nothing measurable.
//
//	go test -run '^$' -bench IdleServices -benchtime 20000x ./tunnel
func BenchmarkIdleServices(b *testing.B) {
	for _, idle := range []int{0, 2} {
		b.Run(map[int]string{0: "alone", 2: "with-2-idle-services"}[idle], func(b *testing.B) {
			rs := redistest.Start(b)
			rdb := rs.Client(b)
			sent := &redisinfo.Sent{}
			rdb.AddHook(sent)
			quiet := slog.New(slog.DiscardHandler)
			startServer(b, rdb, tunnel.ServerOptions{Concurrency: 64, Logger: quiet}, func(s *tunnel.Server) {
				s.RegisterService(&echoDesc, map[string]echoHandler{"Echo": func(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
					return in, nil
				}})
				if idle > 0 {
					s.RegisterService(&jobsDesc, &jobs{runs: map[string]int{}, attempts: map[string][]int{}})
					s.RegisterService(&vaultDesc, newVault())
				}
			})
			client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			echo := method("Echo")
			waitAnswered(b, client, echo)
			in := wrapperspb.String("hello")
			runConcurrentAt(b, []int{64}, func() error {
				return client.Invoke(context.Background(), echo, in, new(wrapperspb.StringValue))
			}, func() redisinfo.Sample { return redisSample(b, rdb) }, sent)
		})
	}
}

// slowInfo is a service whose one method takes 20 ms.
var slowInfo = tunnel.ServiceInfo{Name: "test.v1.Slow"}

var slowDesc = tunnel.ServiceDesc{Service: &slowInfo, Methods: []tunnel.MethodDesc{{
	Service: &slowInfo, Name: "Sleep",
	Handler: func(_ any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
		in := new(wrapperspb.StringValue)
		if err := decode(in); err != nil {
			return nil, err
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
		return in, nil
	},
}}}

// BenchmarkSlowNeighbour measures what a busy, slow service costs a busy,
// fast one on the same server: 32 callers of the echo service on a server
// with Concurrency 32, alone, then while 64 callers keep a service whose
// calls take 20 ms busy. The fast service must not be starved: compare
// its calls/s in the two, in one run.
//
//	go test -run '^$' -bench SlowNeighbour -benchtime 5000x ./tunnel
func BenchmarkSlowNeighbour(b *testing.B) {
	for _, slow := range []bool{false, true} {
		b.Run(map[bool]string{false: "alone", true: "beside-a-slow-service"}[slow], func(b *testing.B) {
			rs := redistest.Start(b)
			rdb := rs.Client(b)
			quiet := slog.New(slog.DiscardHandler)
			startServer(b, rdb, tunnel.ServerOptions{Concurrency: 32, Logger: quiet}, func(s *tunnel.Server) {
				s.RegisterService(&echoDesc, map[string]echoHandler{"Echo": func(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
					return in, nil
				}})
				s.RegisterService(&slowDesc, struct{}{})
			})
			client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			echo, sleep := method("Echo"), &slowDesc.Methods[0]
			waitAnswered(b, client, echo)
			ctx, stop := context.WithCancel(context.Background())
			var neighbours sync.WaitGroup
			var slowCalls atomic.Int64
			if slow {
				for range 64 {
					neighbours.Go(func() {
						for ctx.Err() == nil {
							if client.Invoke(ctx, sleep, wrapperspb.String("z"), new(wrapperspb.StringValue)) == nil {
								slowCalls.Add(1)
							}
						}
					})
				}
				waitFor(b, "the slow service to be busy", func() bool { return slowCalls.Load() > 64 })
			}
			in := wrapperspb.String("hello")
			runConcurrentAt(b, []int{32}, func() error {
				return client.Invoke(context.Background(), echo, in, new(wrapperspb.StringValue))
			}, nil, nil)
			stop()
			neighbours.Wait()
		})
	}
}
