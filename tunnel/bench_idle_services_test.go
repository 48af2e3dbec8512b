package tunnel_test

import (
	"context"
	"log/slog"
	"testing"

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
			sent := &commandCounter{}
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
