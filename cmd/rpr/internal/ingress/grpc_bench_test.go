package ingress

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// BenchmarkGRPCPassthrough measures a unary call (128-byte request and
// response) through ingress, Redis and egress to a grpc-go upstream: by
// the ingress's own gRPC server (Serve) and behind net/http (ServeHTTP),
// sent as a Call (what a unary call is sent as) and as a Stream (what a
// unary call that misses the waits is sent as), at concurrency 1 and
// 16, against the same upstream called directly. It reports the Redis
// commands per call (INFO commandstats, those inside scripts included,
// the idle readers' too).
//
//	go test -run '^$' -bench GRPCPassthrough -benchtime 2000x ./internal/ingress
func BenchmarkGRPCPassthrough(b *testing.B) {
	w := newGRPCWorld(b)
	direct := dial(b, w.upAddr)
	req := &testgrpc.SimpleRequest{ResponseSize: 128, Payload: &testgrpc.Payload{Body: make([]byte, 128)}}
	for _, cc := range []*grpc.ClientConn{direct, w.native, w.httpConn} { // the first calls are slow
		if _, err := testgrpc.NewTestServiceClient(cc).UnaryCall(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	run := func(name string, cc *grpc.ClientConn) {
		tc := testgrpc.NewTestServiceClient(cc)
		for _, conc := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/c%d", name, conc), func(b *testing.B) {
				before := redisCommands(b, w.rdb)
				start := time.Now()
				b.SetParallelism((conc + 1) / 2) // GOMAXPROCS is 2 on the project's machines
				if conc == 1 {
					b.SetParallelism(1)
				}
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := tc.UnaryCall(context.Background(), req); err != nil {
							b.Error(err)
							return
						}
					}
				})
				elapsed := time.Since(start)
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
				b.ReportMetric(float64(redisCommands(b, w.rdb)-before)/float64(b.N), "redis-cmds/call")
			})
		}
	}
	run("direct", direct)
	run("Serve/Call", w.native)
	run("ServeHTTP/Call", w.httpConn)
	w.ingress.streaming.add("/grpc.testing.TestService/UnaryCall")
	run("Serve/Stream", w.native)
	run("ServeHTTP/Stream", w.httpConn)
}

// redisCommands returns how many commands Redis has run.
func redisCommands(tb testing.TB, rdb *redis.Client) int64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total int64
	for line := range strings.SplitSeq(info, "\n") {
		_, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		total += n
	}
	return total
}
