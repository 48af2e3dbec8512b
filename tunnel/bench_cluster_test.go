package tunnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// BenchmarkClusterShards compares, on one 6-node loopback Redis Cluster
// (3 masters, 3 replicas) and in one run, a unary echo service with 1
// shard (all its keys on one master) against the same service with 3
// shards (spread over the masters), at concurrency 128, and logs the
// throughput ratio.
//
//	go test -run '^$' -bench ClusterShards -benchtime 20000x -v ./tunnel
func BenchmarkClusterShards(b *testing.B) {
	cluster := redistest.StartCluster(b)
	ctx := context.Background()
	open := func() *redis.ClusterClient {
		rdb, err := tunnel.Open(ctx, cluster.URL())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = rdb.Close() })
		return rdb.(*redis.ClusterClient)
	}
	admin := open()
	quiet := slog.New(slog.DiscardHandler)
	throughput := map[int]float64{}
	for _, shards := range []int{1, 3} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			name := fmt.Sprintf("test.v1.BenchShards%d", shards)
			desc := echoServiceDesc(name, shards)
			startServer(b, open(), tunnel.ServerOptions{Concurrency: 256, Logger: quiet}, func(s *tunnel.Server) { s.RegisterService(desc, struct{}{}) })
			client, err := tunnel.NewClient(open(), tunnel.ClientOptions{Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			m := &desc.Methods[0]
			in := wrapperspb.String("hello")
			waitAnswered(b, client, m)

			const concurrency = 128
			latencies := make([]time.Duration, b.N)
			var next atomic.Int64
			before := clusterSample(b, admin)
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for range concurrency {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						t0 := time.Now()
						if err := client.Invoke(ctx, m, in, new(wrapperspb.StringValue)); err != nil {
							b.Error(err)
							return
						}
						latencies[i] = time.Since(t0)
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			used := clusterSample(b, admin).Sub(before)
			slices.Sort(latencies)
			throughput[shards] = float64(b.N) / elapsed.Seconds()
			b.ReportMetric(throughput[shards], "calls/s")
			b.ReportMetric(ms(latencies[b.N/2]), "p50-ms")
			b.ReportMetric(ms(latencies[b.N*99/100]), "p99-ms")
			b.ReportMetric(float64(used.Commands)/float64(b.N), "redis-ops/call")
			b.ReportMetric(float64(used.CPU.Microseconds())/float64(b.N), "redis-cpu-us/call")
			b.ReportMetric(0, "ns/op")
		})
	}
	if throughput[1] > 0 && throughput[3] > 0 {
		b.Logf("3 shards / 1 shard throughput at concurrency 128: %.2f (%.0f vs %.0f calls/s)", throughput[3]/throughput[1], throughput[3], throughput[1])
	}
}

// clusterSample sums the counters of every master.
func clusterSample(b *testing.B, rdb *redis.ClusterClient) redisinfo.Sample {
	var mu sync.Mutex
	var total redisinfo.Sample
	err := rdb.ForEachMaster(context.Background(), func(ctx context.Context, node *redis.Client) error {
		s, err := redisinfo.Read(ctx, node)
		if err != nil {
			return err
		}
		mu.Lock()
		total.Commands += s.Commands
		total.CPU += s.CPU
		total.UsedMemory += s.UsedMemory
		mu.Unlock()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return total
}

// echoServiceDesc is a one-method echo service named name, with shards
// shards.
func echoServiceDesc(name string, shards int) *tunnel.ServiceDesc {
	info := &tunnel.ServiceInfo{Name: name, Shards: shards}
	return &tunnel.ServiceDesc{Service: info, Methods: []tunnel.MethodDesc{{
		Service: info, Name: "Echo",
		Handler: func(_ any, _ context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
			in := new(wrapperspb.StringValue)
			return in, decode(in)
		},
	}}}
}
