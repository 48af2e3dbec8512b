package tunnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
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

// BenchmarkAsyncEndToEnd enqueues b.N small async requests from 16
// goroutines and measures the time until every one has been processed by a
// server, then, against the same redis-server, a plain pipelined XADD loop
// writing as many entries (the floor of any Redis-streams queue: writing
// alone, nothing processed). It reports processed requests/s, the ratio to
// the XADD loop, enqueue latency p50/p99, Redis commands per request
// (INFO commandstats, everything counted: enqueue, read, begin, complete,
// heartbeats, mover, janitor), the round trips the client and the server
// make per request (a pipeline counts once) and the reads and writes of
// connections Redis makes per request.
//
//	go test -run '^$' -bench AsyncEndToEnd -benchtime 20000x ./tunnel
func BenchmarkAsyncEndToEnd(b *testing.B) {
	rs := redistest.Start(b)
	rdb := rs.Client(b)
	quiet := slog.New(slog.DiscardHandler)
	var processed atomic.Int64
	done := make(chan struct{})
	var target atomic.Int64
	info := &tunnel.ServiceInfo{Name: jobsService}
	counting := tunnel.ServiceDesc{Service: info, Methods: []tunnel.MethodDesc{{
		Service: info, Name: "Do", Async: true,
		Handler: func(_ any, _ context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
			if err := decode(new(wrapperspb.StringValue)); err != nil {
				return nil, err
			}
			if processed.Add(1) == target.Load() {
				close(done)
			}
			return nil, nil
		},
	}}}
	sent := &redisinfo.Sent{} // what the server and the client send
	serverRDB, clientRDB := rs.Client(b), rs.Client(b)
	serverRDB.AddHook(sent)
	clientRDB.AddHook(sent)
	startServer(b, serverRDB, tunnel.ServerOptions{Concurrency: 256, Logger: quiet}, func(s *tunnel.Server) { s.RegisterService(&counting, struct{}{}) })
	ctx := context.Background()
	client, err := tunnel.NewClient(clientRDB, tunnel.ClientOptions{Logger: quiet, MaxBacklog: int64(b.N) + 1000})
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	do := &counting.Methods[0]

	// Warm up: one request through, so connections and scripts are ready.
	target.Store(1)
	if _, err := client.Enqueue(ctx, do, wrapperspb.String("warm")); err != nil {
		b.Fatal(err)
	}
	<-done
	processed.Store(0)
	done = make(chan struct{})
	target.Store(int64(b.N))

	const workers = 16
	in := wrapperspb.String("hello, edge")
	latencies := make([][]time.Duration, workers)
	before := redisSample(b, rdb)
	roundTrips := sent.RoundTrips()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < b.N; i += workers {
				t0 := time.Now()
				if _, err := client.Enqueue(ctx, do, in); err != nil {
					b.Error(err)
					return
				}
				latencies[w] = append(latencies[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	enqueued := time.Since(start)
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d processed after 5 minutes", processed.Load(), b.N)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	used := redisSample(b, rdb).Sub(before)
	commands := used.Commands
	roundTrips = sent.RoundTrips() - roundTrips

	// The floor: a plain pipelined XADD loop, same count, same Redis.
	xaddStart := time.Now()
	const pipeline = 100
	payload := make([]byte, 40) // about the size of an rpr envelope of this request
	for sent := 0; sent < b.N; sent += pipeline {
		pipe := rdb.Pipeline()
		for range min(pipeline, b.N-sent) {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: "baseline:xadd", Values: []any{"e", payload}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	xaddElapsed := time.Since(xaddStart)

	all := slices.Concat(latencies...)
	slices.Sort(all)
	rate := float64(b.N) / elapsed.Seconds()
	xaddRate := float64(b.N) / xaddElapsed.Seconds()
	b.ReportMetric(rate, "req/s")
	b.ReportMetric(float64(b.N)/enqueued.Seconds(), "enqueued/s")
	b.ReportMetric(xaddRate, "xadd/s")
	b.ReportMetric(rate/xaddRate, "ratio-to-xadd")
	b.ReportMetric(ms(all[len(all)/2]), "enqueue-p50-ms")
	b.ReportMetric(ms(all[len(all)*99/100]), "enqueue-p99-ms")
	b.ReportMetric(float64(commands)/float64(b.N), "redis-cmds/req")
	b.ReportMetric(float64(used.CPU.Microseconds())/float64(b.N), "redis-cpu-us/req")
	b.ReportMetric(float64(roundTrips)/float64(b.N), "roundtrips/req")
	b.ReportMetric(float64(used.Reads+used.Writes)/float64(b.N), "redis-reads+writes/req")
	b.ReportMetric(0, "ns/op")
	if os.Getenv("RPR_BENCH_COMMANDSTATS") != "" {
		for _, l := range strings.Split(rdb.Info(ctx, "commandstats").Val(), "\n") {
			if strings.HasPrefix(l, "cmdstat_") {
				fmt.Fprintln(os.Stderr, strings.TrimSpace(l))
			}
		}
	}
	b.Logf("%d requests: processed in %v (%.0f req/s), enqueued in %v; XADD loop %v (%.0f/s); %s Redis commands per request",
		b.N, elapsed.Round(time.Millisecond), rate, enqueued.Round(time.Millisecond), xaddElapsed.Round(time.Millisecond), xaddRate,
		strconv.FormatFloat(float64(commands)/float64(b.N), 'f', 2, 64))
}

// BenchmarkQueuedMemory measures Redis memory per queued async request
// with a 128-byte payload: b.N requests are enqueued with no server
// running, and the growth of INFO used_memory is divided by b.N.
//
//	go test -run '^$' -bench QueuedMemory -benchtime 100000x ./tunnel
func BenchmarkQueuedMemory(b *testing.B) {
	rs := redistest.Start(b)
	rdb := rs.Client(b)
	quiet := slog.New(slog.DiscardHandler)
	client, err := tunnel.NewClient(rs.Client(b), tunnel.ClientOptions{Logger: quiet, MaxBacklog: int64(b.N) + 1})
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	do := jobsMethod("Do")
	in := wrapperspb.String(strings.Repeat("x", 126)) // 128 bytes marshalled
	if n := proto.Size(in); n != 128 {
		b.Fatalf("payload is %d bytes, want 128", n)
	}
	if _, err := client.Enqueue(ctx, do, in); err != nil { // creates the stream
		b.Fatal(err)
	}
	before := redisSample(b, rdb).UsedMemory
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < b.N; i += 16 {
				if _, err := client.Enqueue(ctx, do, in); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	grown := redisSample(b, rdb).UsedMemory - before
	b.ReportMetric(float64(grown)/float64(b.N), "redis-bytes/queued-request")
	b.ReportMetric(0, "ns/op")
}
