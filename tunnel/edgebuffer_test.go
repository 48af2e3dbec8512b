package tunnel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// The edge-buffer tests: an rpr queue in front of a service that is down
// (or slow, or stopped) absorbs what arrives, refuses what it has no room
// for, and loses nothing. Each test accounts for every request it made:
//
//	accepted = processed + dead-lettered + still queued (stream + retry set)
//
// checked on an atomic snapshot of Redis (snapshotScript), so the equation
// holds exactly at every sample, not only once everything settled.

// bufferService is the edge-buffer tests' own async service: the Jobs
// implementation (async_test.go) under another name, with a time limit per
// attempt longer than any outage the tests simulate, so a handler that
// waits out the outage is never cancelled (and retried) by its deadline.
const bufferService = "test.v1.Buffer"

func bufferMethod(name string, idempotent bool) tunnel.MethodDesc {
	m := jobMethod(name, idempotent, fastRetry)
	m.Service = &bufferInfo
	m.Timeout = 3 * time.Minute
	return m
}

var bufferInfo = tunnel.ServiceInfo{Name: bufferService}

var bufferDesc = tunnel.ServiceDesc{
	Service: &bufferInfo,
	Methods: []tunnel.MethodDesc{bufferMethod("Absorb", false)},
}

var absorbMethod = &bufferDesc.Methods[0]

// Keys of bufferService, spelled out to inspect Redis.
const (
	bufferStream = "rpr:v1:{" + bufferService + "}:req"
	bufferRetry  = "rpr:v1:{" + bufferService + "}:retry"
	bufferDLQ    = "rpr:v1:{" + bufferService + "}:dlq"
	bufferStates = "rpr:v1:{" + bufferService + "}:st:*"
)

// bufferWorld is one edge-buffer test: a real redis-server, the Jobs
// implementation recording executions, and servers of bufferService
// started on demand.
type bufferWorld struct {
	t     *testing.T
	redis *redistest.Server
	rdb   *redis.Client // the test's own connection, for inspection
	jobs  *jobs
	logs  *logBuffer
}

func newBufferWorld(t *testing.T) *bufferWorld {
	t.Helper()
	rs := redistest.Start(t)
	w := &bufferWorld{t: t, redis: rs, rdb: rs.Client(t), logs: &logBuffer{},
		jobs: &jobs{runs: map[string]int{}, attempts: map[string][]int{}, at: map[string]time.Time{}}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log (end):\n%s", tail(w.logs.String(), 40))
		}
	})
	return w
}

func (w *bufferWorld) logger(who string) *slog.Logger {
	return slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("who", who)
}

// newClient returns a client on a Redis connection of its own, as it
// would be in a process of its own.
func (w *bufferWorld) newClient(opts tunnel.ClientOptions) *tunnel.Client {
	w.t.Helper()
	if opts.Logger == nil {
		opts.Logger = w.logger("client")
	}
	c, err := tunnel.NewClient(w.redis.Client(w.t), opts)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = c.Close() })
	return c
}

// serve starts a server of bufferService on a connection of its own and
// returns a function that stops it gracefully and waits for Serve.
func (w *bufferWorld) serve(opts tunnel.ServerOptions) (stop func()) {
	w.t.Helper()
	if opts.Logger == nil {
		opts.Logger = w.logger("server")
	}
	return serveService(w.t, w.redis, &bufferDesc, w.jobs, opts)
}

// snapshotScript reads, in one atomic step, how many of the service's
// requests succeeded (state hashes in SUCCESS: one per idempotency key,
// here one per request) and how many wait in the stream (new or running),
// the retry set and the dead-letter stream. The runtime moves a request
// between these in single scripts (completeScript, moveDueScript), so at
// any instant every accepted request is in exactly one of them. Test
// bookkeeping only: it touches keys it was not given, which a standalone
// Redis allows.
//
//	KEYS[1] request stream   KEYS[2] retry set   KEYS[3] dead-letter stream
//	ARGV[1] pattern of the state hashes
var snapshotScript = redis.NewScript(`
local success, cursor = 0, '0'
repeat
  local r = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = r[1]
  for _, k in ipairs(r[2]) do
    if redis.call('HGET', k, 'state') == 'SUCCESS' then success = success + 1 end
  end
until cursor == '0'
return {success, redis.call('XLEN', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('XLEN', KEYS[3])}
`)

// ledger is one atomic snapshot of where the accepted requests are.
type ledger struct {
	processed, stream, retry, dead int64
}

func (l ledger) total() int64 { return l.processed + l.stream + l.retry + l.dead }

func (l ledger) String() string {
	return fmt.Sprintf("processed %d + dead-lettered %d + queued %d (stream %d, retry set %d) = %d",
		l.processed, l.dead, l.stream+l.retry, l.stream, l.retry, l.total())
}

func (w *bufferWorld) ledger() ledger {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := snapshotScript.Run(ctx, w.rdb, []string{bufferStream, bufferRetry, bufferDLQ}, bufferStates).Int64Slice()
	if err != nil || len(v) != 4 {
		w.t.Fatalf("ledger snapshot: %v %v", v, err)
	}
	return ledger{processed: v[0], stream: v[1], retry: v[2], dead: v[3]}
}

// checkLedger asserts the accounting invariant on a fresh snapshot.
func (w *bufferWorld) checkLedger(when string, accepted int64) ledger {
	w.t.Helper()
	l := w.ledger()
	if l.total() != accepted {
		w.t.Errorf("%s: accepted %d != %v", when, accepted, l)
	} else {
		w.t.Logf("%s: accepted %d = %v", when, accepted, l)
	}
	return l
}

// usedMemory returns INFO memory's used_memory, in bytes.
func (w *bufferWorld) usedMemory() int64 {
	w.t.Helper()
	s, err := redisinfo.Read(context.Background(), w.rdb)
	if err != nil {
		w.t.Fatal(err)
	}
	return s.UsedMemory
}

// checkRanOnce asserts that each of values ran exactly once and that
// nothing else ran.
func (w *bufferWorld) checkRanOnce(values map[string]bool) {
	w.t.Helper()
	w.jobs.mu.Lock()
	defer w.jobs.mu.Unlock()
	bad := 0
	for v := range values {
		if n := w.jobs.runs[v]; n != 1 {
			if bad++; bad <= 10 {
				w.t.Errorf("request %q ran %d times, want exactly 1", v, n)
			}
		}
	}
	for v, n := range w.jobs.runs {
		if !values[v] {
			if bad++; bad <= 10 {
				w.t.Errorf("request %q ran %d times but was never accepted", v, n)
			}
		}
	}
	if bad > 10 {
		w.t.Errorf("... %d wrong run counts in all", bad)
	}
}

// TestEdgeBufferSurvivesOutage: the service behind the queue is down for
// 30s (every handler blocks until the outage ends) while 20,000 async
// requests arrive from 16 goroutines. All are accepted and held in Redis
// at a bounded cost per request; when the service recovers, every one runs
// exactly once, none is lost or dead-lettered, and the accounting holds
// at every sample.
func TestEdgeBufferSurvivesOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("a 30s outage; skipped with -short")
	}
	const (
		requests    = 20_000
		senders     = 16
		concurrency = 64
		outage      = 30 * time.Second
		// maxBytesPerRequest bounds Redis's memory per queued request
		// (payload: an 18-byte StringValue, 16 bytes of text). Measured
		// with Redis 7.0 (used_memory before and after): about 210 B per
		// request, of which the msgpack envelope is ~183 B (the request id
		// twice, as id and as idempotency key; the method name; times) and
		// the stream's listpack framing the rest. The bound leaves more
		// than 2x headroom for other Redis versions and allocators, and
		// still catches a regression such as a hash per queued request
		// (~300 B each, see the done markers logged at the end).
		maxBytesPerRequest = 500
	)
	w := newBufferWorld(t)
	start := time.Now()
	down := make(chan struct{})
	var blockedNow, blockedMax atomic.Int64
	w.jobs.setFunc(func(ctx context.Context, in *wrapperspb.StringValue) error {
		n := blockedNow.Add(1)
		defer blockedNow.Add(-1)
		for m := blockedMax.Load(); n > m && !blockedMax.CompareAndSwap(m, n); m = blockedMax.Load() {
		}
		select {
		case <-down:
			return nil
		case <-ctx.Done():
			// Never with the method's 3-minute limit; if it happens, the
			// retry shows up as a second run and fails the test.
			return tunnel.NewError(tunnel.DeadlineExceeded, ctx.Err())
		}
	})
	client := w.newClient(tunnel.ClientOptions{})
	w.serve(tunnel.ServerOptions{Concurrency: concurrency})
	// Let the client set up its view of the service before measuring, so
	// the baseline includes everything but the queued requests.
	if _, err := client.Enqueue(context.Background(), absorbMethod, wrapperspb.String("warm-up")); err != nil {
		t.Fatal(err)
	}
	waitLong(t, 30*time.Second, "the warm-up request to block", func() bool { return blockedNow.Load() == 1 }, nil)
	before := w.usedMemory()

	// 20,000 requests from 16 goroutines, 1,250 each.
	var accepted atomic.Int64
	accepted.Add(1) // the warm-up
	values := make([]string, requests)
	errs := make(chan error, senders)
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for i := g; i < requests; i += senders {
				v := fmt.Sprintf("req-%012d", i) // 16 bytes
				values[i] = v
				if _, err := client.Enqueue(context.Background(), absorbMethod, wrapperspb.String(v)); err != nil {
					errs <- fmt.Errorf("enqueue %s: %w", v, err)
					return
				}
				accepted.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("%v (during an outage, with the queue far below its cap, every request must be accepted)", err)
	}
	enqueuedIn := time.Since(start)

	// Peak backlog: everything is queued, nothing can finish.
	peak := w.usedMemory()
	streamBytes, err := w.rdb.MemoryUsage(context.Background(), bufferStream, 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	perRequest := float64(peak-before) / requests
	var envelopeBytes int
	if last, err := w.rdb.XRevRangeN(context.Background(), bufferStream, "+", "-", 1).Result(); err == nil && len(last) == 1 {
		e, _ := last[0].Values["e"].(string)
		envelopeBytes = len(e)
	}
	t.Logf("Redis memory with %d requests queued during the outage: used_memory %d -> %d bytes: %.0f bytes per queued request (%.1f MB for %d; the stream alone, MEMORY USAGE: %.0f B per entry, of which the envelope %d B); %d handlers blocked; enqueued in %v",
		requests, before, peak, perRequest, float64(peak-before)/1e6, requests, float64(streamBytes)/(requests+1), envelopeBytes, blockedNow.Load(), enqueuedIn.Round(time.Millisecond))
	if perRequest > maxBytesPerRequest {
		t.Errorf("%.0f bytes of Redis memory per queued request, over the %d-byte bound", perRequest, maxBytesPerRequest)
	}
	if got := w.jobs.distinct(); got > concurrency {
		t.Errorf("%d requests started during the outage with Concurrency %d", got, concurrency)
	}
	w.checkLedger("during the outage", accepted.Load())

	// The outage ends 30s after the test started, with every handler slot
	// busy: the server takes as many requests as it may run, and no more.
	time.Sleep(time.Until(start.Add(outage)))
	waitLong(t, 30*time.Second, fmt.Sprintf("all %d handler slots to be busy", concurrency),
		func() bool { return blockedNow.Load() == concurrency },
		func() string { return fmt.Sprintf("%d blocked", blockedNow.Load()) })
	close(down)
	t.Logf("outage over after %v; %d handlers were blocked (at most %d at once)", time.Since(start).Round(time.Millisecond), concurrency, blockedMax.Load())
	if m := blockedMax.Load(); m > concurrency {
		t.Errorf("%d handlers ran at once with Concurrency %d", m, concurrency)
	}

	// Sample the ledger while the backlog drains.
	total := accepted.Load()
	samples := 0
	for w.jobs.distinct() < int(total) && samples < 20 {
		l := w.checkLedger(fmt.Sprintf("draining, sample %d", samples+1), total)
		samples++
		if l.stream+l.retry == 0 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	waitLong(t, 2*time.Minute, "every accepted request to run", func() bool { return w.jobs.distinct() == int(total) },
		func() string { return fmt.Sprintf("%d of %d ran; %v", w.jobs.distinct(), total, w.ledger()) })
	waitLong(t, time.Minute, "the queue to empty", func() bool { l := w.ledger(); return l.stream == 0 && l.retry == 0 },
		func() string { return w.ledger().String() })
	t.Logf("backlog of %d drained %v after the outage ended", total, time.Since(start.Add(outage)).Round(time.Millisecond))

	l := w.checkLedger("at the end", total)
	if l.processed != total || l.dead != 0 {
		t.Errorf("at the end: %v; want all %d processed, none dead-lettered", l, total)
	}
	want := map[string]bool{"warm-up": true}
	for _, v := range values {
		want[v] = true
	}
	w.checkRanOnce(want)
	after := w.usedMemory()
	streamBytes, _ = w.rdb.MemoryUsage(context.Background(), bufferStream, 0).Result()
	var marker int64
	if keys, _ := w.rdb.Keys(context.Background(), bufferStates).Result(); len(keys) > 0 {
		marker, _ = w.rdb.MemoryUsage(context.Background(), keys[0], 0).Result()
	}
	t.Logf("after the drain: used_memory %d bytes (%.0f B per processed request, mostly the idempotency window's done markers: one is %d B by MEMORY USAGE; the emptied stream %d B)",
		after, float64(after-before)/requests, marker, streamBytes)
}

// TestOverflowAccounting: with a small cap, four clients (separate Client
// instances on separate connections) enqueue three times the cap while no
// server runs. Every call gets a receipt or a refusal that says "not
// executed, retry after ..."; the queue never holds more than the cap; once
// a server runs, exactly the accepted requests run, once each. The refused
// ones are then sent again, as their callers were told to, until all are
// in: nothing is lost, nothing runs twice.
func TestOverflowAccounting(t *testing.T) {
	const (
		capacity = 500
		clients  = 4
		senders  = 5 // goroutines per client
		perGo    = 3 * capacity / (clients * senders)
		total    = clients * senders * perGo // 3x the cap
	)
	w := newBufferWorld(t)

	// Watch the queue's length throughout the enqueueing.
	stopWatch := make(chan struct{})
	var maxSeen atomic.Int64
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watch := w.redis.Client(t)
		for {
			pipe := watch.Pipeline()
			xl := pipe.XLen(context.Background(), bufferStream)
			zc := pipe.ZCard(context.Background(), bufferRetry)
			if _, err := pipe.Exec(context.Background()); err == nil || errors.Is(err, redis.Nil) {
				if n := xl.Val() + zc.Val(); n > maxSeen.Load() {
					maxSeen.Store(n)
				}
			}
			select {
			case <-stopWatch:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()

	type result struct {
		value string
		err   error
	}
	results := make(chan result, total)
	var wg sync.WaitGroup
	for c := range clients {
		client := w.newClient(tunnel.ClientOptions{MaxBacklog: capacity})
		for g := range senders {
			wg.Go(func() {
				for i := range perGo {
					v := fmt.Sprintf("c%d-g%d-%03d", c, g, i)
					_, err := client.Enqueue(context.Background(), absorbMethod, wrapperspb.String(v))
					results <- result{v, err}
				}
			})
		}
	}
	wg.Wait()
	close(results)
	close(stopWatch)
	<-watched

	accepted, refused := map[string]bool{}, map[string]bool{}
	for r := range results {
		switch {
		case r.err == nil:
			accepted[r.value] = true
		case tunnel.CodeOf(r.err) == tunnel.ResourceExhausted && tunnel.NotExecuted(r.err):
			refused[r.value] = true
			if after, ok := tunnel.RetryAfter(r.err); !ok || after <= 0 {
				t.Errorf("refusal of %s has no retry-after hint: %v", r.value, r.err)
			}
		default:
			t.Errorf("enqueue %s: %v (want a receipt or RESOURCE_EXHAUSTED, not executed)", r.value, r.err)
		}
	}
	t.Logf("%d clients enqueued %d with a cap of %d and no server: accepted %d, refused %d; the queue held at most %d",
		clients, total, capacity, len(accepted), len(refused), maxSeen.Load())
	// Nothing drains, so a refusal (from the cached backlog at the 85%
	// watermark, or from the cap in the enqueue script) means at least
	// 85% of the cap was queued.
	if len(accepted) > capacity || len(accepted) < capacity*85/100 || len(accepted)+len(refused) != total {
		t.Errorf("accepted %d, refused %d of %d; want between %d and %d accepted (watermark, cap)", len(accepted), len(refused), total, capacity*85/100, capacity)
	}
	if maxSeen.Load() > capacity {
		t.Errorf("the queue held %d requests, over its cap of %d", maxSeen.Load(), capacity)
	}
	if l := w.checkLedger("before any server", int64(len(accepted))); l.stream != int64(len(accepted)) {
		t.Errorf("%d requests in the stream, %d accepted", l.stream, len(accepted))
	}

	w.serve(tunnel.ServerOptions{})
	waitLong(t, time.Minute, "every accepted request to run", func() bool { return w.jobs.distinct() >= len(accepted) },
		func() string { return fmt.Sprintf("%d of %d ran", w.jobs.distinct(), len(accepted)) })
	waitLong(t, time.Minute, "the queue to empty", func() bool { l := w.ledger(); return l.stream == 0 && l.retry == 0 },
		func() string { return w.ledger().String() })
	if l := w.checkLedger("after the server drained the queue", int64(len(accepted))); l.processed != int64(len(accepted)) || l.dead != 0 {
		t.Errorf("%v; want exactly the %d accepted processed", l, len(accepted))
	}
	w.checkRanOnce(accepted)

	// The refused callers try again, as they were told, until all are in.
	retrier := w.newClient(tunnel.ClientOptions{MaxBacklog: capacity})
	pending := refused
	rounds := 0
	deadline := time.Now().Add(time.Minute)
	for len(pending) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d refused requests still not accepted after a minute of retrying", len(pending))
		}
		rounds++
		next := map[string]bool{}
		for v := range pending {
			_, err := retrier.Enqueue(context.Background(), absorbMethod, wrapperspb.String(v))
			switch {
			case err == nil:
				accepted[v] = true
			case tunnel.CodeOf(err) == tunnel.ResourceExhausted && tunnel.NotExecuted(err):
				next[v] = true
			default:
				t.Fatalf("enqueue %s again: %v", v, err)
			}
		}
		pending = next
		if len(pending) > 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitLong(t, time.Minute, "every request to run", func() bool { return w.jobs.distinct() == total },
		func() string { return fmt.Sprintf("%d of %d ran", w.jobs.distinct(), total) })
	waitLong(t, time.Minute, "the queue to empty", func() bool { l := w.ledger(); return l.stream == 0 && l.retry == 0 },
		func() string { return w.ledger().String() })
	if l := w.checkLedger("after the refused requests were sent again", total); l.processed != total || l.dead != 0 {
		t.Errorf("%v; want all %d processed", l, total)
	}
	w.checkRanOnce(accepted)
	t.Logf("the %d refused requests were all accepted within %d rounds of retrying", len(refused), rounds)
}
