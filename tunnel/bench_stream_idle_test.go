package tunnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// Scale: many concurrent idle server streams (watch-style: the handler
// sends nothing and waits) from ONE client against TWO servers, all in
// this process but each with Redis connections of its own, told apart in
// CLIENT LIST by their client names. What an open stream costs: Redis
// connections (which must not grow with the number of streams),
// goroutines, Go heap, Redis memory.
//
//	go test -run '^$' -bench IdleStreams -benchtime 1x ./tunnel/
//	RPR_IDLE_STREAMS=20000 go test -run '^$' -bench IdleStreams -benchtime 1x ./tunnel/

// idleFigures is what n idle streams cost, measured against the same
// processes before the streams were opened.
type idleFigures struct {
	streams          int
	conns            map[string][2]int // client name -> connections before, with the streams open
	goroutines       float64           // per stream
	heapBytes        float64           // per stream: Go heap in use (after GC)
	stackBytes       float64           // per stream: goroutine stacks
	redisBytes       float64           // per stream: Redis used_memory
	openTime         time.Duration     // to open them all
	serverA, serverB int64             // streams each server runs
}

// idleNames are the Redis client names of the three parties.
var idleNames = []string{"idle-client", "idle-server-a", "idle-server-b"}

// openIdleStreams opens n idle Watch streams (flowService's Down method,
// its handler waiting for its context) from one client against two
// servers, measures them, and ends them all.
func openIdleStreams(tb testing.TB, n int) idleFigures {
	tb.Helper()
	rs := redistest.Start(tb, redistest.WithConfig("maxclients", "20000"))
	admin := rs.Client(tb)
	ctx := context.Background()
	// Pools as big as the streams are many: a stream that held a
	// connection would show as one more, where go-redis's default pool
	// (10 per CPU) would cap the count and hide it.
	conn := func(name string) *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), ClientName: name, PoolSize: 4096})
		tb.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	quiet := slog.New(slog.DiscardHandler)
	var running [2]atomic.Int64
	watch := func(i int) *flowImpl {
		return &flowImpl{down: func(_ *flowMsg, s flowDownSrv) error {
			running[i].Add(1)
			defer running[i].Add(-1)
			<-s.Context().Done()
			return nil
		}}
	}
	for i, name := range idleNames[1:] {
		startServer(tb, conn(name), tunnel.ServerOptions{WorkerID: name, Logger: quiet, MaxStreams: n}, func(s *tunnel.Server) {
			s.RegisterService(&flowDesc, watch(i))
		})
	}
	client, err := tunnel.NewClient(conn(idleNames[0]), tunnel.ClientOptions{ID: idleNames[0], Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = client.Close() })

	streamsCtx, endStreams := context.WithCancel(ctx)
	defer endStreams()
	var opened atomic.Int64
	open := func() error {
		s, err := client.NewStream(streamsCtx, flowMethod("Down"))
		if err != nil {
			return err
		}
		if err := s.SendMsg(wrapperspb.Bytes(nil)); err != nil {
			return err
		}
		if err := s.CloseSend(); err != nil {
			return err
		}
		opened.Add(1)
		return nil
	}
	// One stream through each server first: everything is set up (pools
	// dialled, response stream and inboxes made) before the baseline.
	// Which server takes an open is up to their readers: on a loaded
	// machine (go test -p 4) the second took longer than 10s to get one.
	waitLong(tb, time.Minute, "both servers to run streams", func() bool {
		if err := open(); err != nil {
			return false
		}
		return running[0].Load() > 0 && running[1].Load() > 0
	}, func() string {
		return fmt.Sprintf("servers run %d and %d streams", running[0].Load(), running[1].Load())
	})
	warm := opened.Load()
	waitFor(tb, "the warm-up streams to run", func() bool { return running[0].Load()+running[1].Load() == warm })
	before := measureIdle(tb, admin)

	// Opened by a fixed number of goroutines, so the connections the
	// opening needs are the same whatever n is.
	const openers = 16
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for range openers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := open(); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		tb.Fatalf("%d of %d streams failed to open, first: %v", failed.Load(), n, firstErr.Load())
	}
	waitLong(tb, 5*time.Minute, fmt.Sprintf("%d streams to run", n), func() bool {
		return running[0].Load()+running[1].Load() == warm+int64(n)
	}, func() string {
		return fmt.Sprintf("%d and %d running", running[0].Load(), running[1].Load())
	})
	openTime := time.Since(start)
	time.Sleep(3 * time.Second) // idle: a few heartbeats, refreshes and caller checks
	after := measureIdle(tb, admin)

	f := idleFigures{streams: n, conns: map[string][2]int{}, openTime: openTime,
		serverA: running[0].Load(), serverB: running[1].Load()}
	per := func(a, b float64) float64 { return (b - a) / float64(n) }
	f.goroutines = per(float64(before.goroutines), float64(after.goroutines))
	f.heapBytes = per(float64(before.heap), float64(after.heap))
	f.stackBytes = per(float64(before.stack), float64(after.stack))
	f.redisBytes = per(float64(before.redisMemory), float64(after.redisMemory))
	for _, name := range idleNames {
		f.conns[name] = [2]int{before.conns[name], after.conns[name]}
	}
	endStreams()
	waitLong(tb, 5*time.Minute, "the streams to end", func() bool {
		return running[0].Load()+running[1].Load() == 0
	}, func() string {
		return fmt.Sprintf("%d and %d still running", running[0].Load(), running[1].Load())
	})
	return f
}

type idleSample struct {
	conns       map[string]int
	goroutines  int
	heap, stack uint64
	redisMemory int64
}

func measureIdle(tb testing.TB, admin *redis.Client) idleSample {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := idleSample{conns: map[string]int{}}
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(list, "\n") {
		for _, field := range strings.Fields(line) {
			if name, ok := strings.CutPrefix(field, "name="); ok && name != "" {
				s.conns[name]++
			}
		}
	}
	info, err := redisinfo.Read(ctx, admin)
	if err != nil {
		tb.Fatal(err)
	}
	s.redisMemory = info.UsedMemory
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.heap, s.stack = ms.HeapAlloc, ms.StackInuse
	s.goroutines = runtime.NumGoroutine()
	return s
}

func (f idleFigures) String() string {
	var conns []string
	for _, name := range idleNames {
		c := f.conns[name]
		conns = append(conns, fmt.Sprintf("%s %d (idle %d)", name, c[1], c[0]))
	}
	return fmt.Sprintf("%d idle streams (server a %d, b %d) opened in %v: Redis connections %s; per stream: %.2f goroutines, %.0f B Go heap, %.0f B goroutine stack, %.0f B Redis used_memory",
		f.streams, f.serverA, f.serverB, f.openTime.Round(time.Millisecond), strings.Join(conns, ", "), f.goroutines, f.heapBytes, f.stackBytes, f.redisBytes)
}

// TestStreamIdleConnectionsFixed opens 200 and then 2,000 idle streams:
// no party's Redis connections grow with the number of streams.
func TestStreamIdleConnectionsFixed(t *testing.T) {
	small := openIdleStreams(t, 200)
	t.Log(small)
	large := openIdleStreams(t, 2000)
	t.Log(large)
	// A pool keeps a connection for each command that was in flight at
	// once: up to one per loop of a side that talks to Redis (a server
	// has about eight: its reader, inbox reader, heartbeat, caller check,
	// lease renewal and batch flushers), whichever happened to overlap,
	// and the longer burst of 2,000 opens overlaps more of them (9
	// against 6 in one CI run). That is the slack; a connection per
	// stream would be hundreds.
	const overlapSlack = 8
	for _, name := range idleNames {
		s, l := small.conns[name][1], large.conns[name][1]
		if l > s+overlapSlack {
			t.Errorf("%s: %d Redis connections with 2,000 streams, %d with 200: they grow with the streams", name, l, s)
		}
		if l > 40 {
			t.Errorf("%s: %d Redis connections for 2,000 idle streams, want a small fixed number", name, l)
		}
	}
}

// BenchmarkIdleStreams opens 10,000 idle streams (RPR_IDLE_STREAMS to
// change it) and reports what each costs. Run it once: -benchtime 1x.
func BenchmarkIdleStreams(b *testing.B) {
	n := 10_000
	if v := os.Getenv("RPR_IDLE_STREAMS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 100_000 {
			b.Fatalf("RPR_IDLE_STREAMS=%q: want a count from 1 to 100000", v)
		}
	}
	for range b.N {
		f := openIdleStreams(b, n)
		b.Log(f)
		for _, name := range idleNames {
			b.ReportMetric(float64(f.conns[name][1]), "conns-"+strings.TrimPrefix(name, "idle-"))
		}
		b.ReportMetric(f.goroutines, "goroutines/stream")
		b.ReportMetric(f.heapBytes, "heap-B/stream")
		b.ReportMetric(f.stackBytes, "stack-B/stream")
		b.ReportMetric(f.redisBytes, "redis-B/stream")
		b.ReportMetric(float64(n)/f.openTime.Seconds(), "opened/s")
		b.ReportMetric(0, "ns/op")
	}
}
