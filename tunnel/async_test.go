package tunnel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// jobsService is a hand-written service with async methods, shaped like
// generated code.
const jobsService = "test.v1.Jobs"

// jobFunc handles one async request of the Jobs service.
type jobFunc func(ctx context.Context, in *wrapperspb.StringValue) error

func jobMethod(name string, idempotent bool, retry *tunnel.RetryPolicy) tunnel.MethodDesc {
	return tunnel.MethodDesc{
		Service:    &jobsInfo,
		Name:       name,
		Async:      true,
		Idempotent: idempotent,
		Retry:      retry,
		Handler: func(impl any, ctx context.Context, decode func(proto.Message) error, interceptor tunnel.UnaryServerInterceptor) (proto.Message, error) {
			in := new(wrapperspb.StringValue)
			if err := decode(in); err != nil {
				return nil, err
			}
			return nil, impl.(*jobs).run(name, ctx, in)
		},
	}
}

// fastRetry makes retries quick enough for tests.
var fastRetry = &tunnel.RetryPolicy{MaxAttempts: 3, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}

var jobsInfo = tunnel.ServiceInfo{Name: jobsService}

var jobsDesc = tunnel.ServiceDesc{
	Service: &jobsInfo,
	Methods: []tunnel.MethodDesc{
		jobMethod("Do", false, fastRetry),
		jobMethod("Redo", true, fastRetry),
	},
}

func jobsMethod(name string) *tunnel.MethodDesc {
	for i := range jobsDesc.Methods {
		if jobsDesc.Methods[i].Name == name {
			return &jobsDesc.Methods[i]
		}
	}
	panic("no method " + name)
}

// jobs is the Jobs implementation: it records every execution and runs the
// test's function.
type jobs struct {
	mu       sync.Mutex
	fn       jobFunc
	runs     map[string]int // executions per request value
	attempts map[string][]int
	at       map[string]time.Time // when each value first ran
}

func (j *jobs) run(name string, ctx context.Context, in *wrapperspb.StringValue) error {
	j.mu.Lock()
	j.runs[in.GetValue()]++
	j.attempts[in.GetValue()] = append(j.attempts[in.GetValue()], tunnel.AttemptFromContext(ctx))
	if _, ok := j.at[in.GetValue()]; !ok {
		j.at[in.GetValue()] = time.Now()
	}
	fn := j.fn
	j.mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn(ctx, in)
}

func (j *jobs) setFunc(fn jobFunc) {
	j.mu.Lock()
	j.fn = fn
	j.mu.Unlock()
}

func (j *jobs) count(value string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.runs[value]
}

func (j *jobs) distinct() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.runs)
}

// asyncWorld is one async test's world: a real redis-server, a client and
// servers started on demand.
type asyncWorld struct {
	t      *testing.T
	redis  *redistest.Server
	rdb    *redis.Client
	client *tunnel.Client
	jobs   *jobs
	logs   *logBuffer
}

func newAsyncWorld(t *testing.T, clientOpts tunnel.ClientOptions) *asyncWorld {
	t.Helper()
	rs := redistest.Start(t)
	w := &asyncWorld{t: t, redis: rs, rdb: rs.Client(t), logs: &logBuffer{},
		jobs: &jobs{runs: map[string]int{}, attempts: map[string][]int{}, at: map[string]time.Time{}}}
	if clientOpts.Logger == nil {
		clientOpts.Logger = slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	var err error
	w.client, err = tunnel.NewClient(rs.Client(t), clientOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.client.Close() })
	return w
}

// serve starts a server of the Jobs service and returns a function that
// stops it and waits for Serve to return.
func (w *asyncWorld) serve(opts tunnel.ServerOptions) (stop func()) {
	w.t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return serveService(w.t, w.redis, &jobsDesc, w.jobs, opts)
}

// serveService starts a Server of desc on a Redis connection of its own
// (startServer) and returns its stop function. Retries are polled every
// 20ms unless opts says otherwise.
func serveService(t *testing.T, rs *redistest.Server, desc *tunnel.ServiceDesc, impl any, opts tunnel.ServerOptions) (stop func()) {
	t.Helper()
	if opts.RetryPollInterval == 0 {
		opts.RetryPollInterval = 20 * time.Millisecond
	}
	_, stop = startServer(t, rs.Client(t), opts, func(s *tunnel.Server) { s.RegisterService(desc, impl) })
	return stop
}

func (w *asyncWorld) enqueue(method, value string, opts ...tunnel.CallOption) (tunnel.Receipt, error) {
	return w.client.Enqueue(context.Background(), jobsMethod(method), wrapperspb.String(value), opts...)
}

// servedOnceThenStopped runs one request ("first") through a server of
// its own and stops it: the consumer group exists and the scripts are
// loaded, and no server runs.
func (w *asyncWorld) servedOnceThenStopped() {
	w.t.Helper()
	stop := w.serve(tunnel.ServerOptions{})
	if _, err := w.enqueue("Do", "first"); err != nil {
		w.t.Fatal(err)
	}
	waitFor(w.t, "the first request to run", func() bool { return w.jobs.count("first") == 1 })
	stop()
}

// goneWorker is the consumer readAsGoneWorker reads as.
const goneWorker = "gone-worker"

// readAsGoneWorker reads the n requests waiting in the stream as a worker
// (goneWorker) that then disappears, leaving them pending under it.
func (w *asyncWorld) readAsGoneWorker(n int) {
	w.t.Helper()
	stream := "rpr:v1:{" + jobsService + "}:req"
	read, err := w.rdb.XReadGroup(context.Background(), &redis.XReadGroupArgs{Group: "workers", Consumer: goneWorker, Streams: []string{stream, ">"}, Count: int64(n) + 1}).Result()
	if err != nil || len(read) != 1 || len(read[0].Messages) != n {
		w.t.Fatalf("read %d requests as a worker that then disappears: %v %v", n, len(read), err)
	}
}

// deadLetters returns the dead-letter stream's entries.
func (w *asyncWorld) deadLetters() []redis.XMessage {
	w.t.Helper()
	msgs, err := w.rdb.XRange(context.Background(), "rpr:v1:{"+jobsService+"}:dlq", "-", "+").Result()
	if err != nil {
		w.t.Fatal(err)
	}
	return msgs
}

// queued returns how many requests wait in the stream and the retry set.
func (w *asyncWorld) queued() (stream, retry int64) {
	w.t.Helper()
	ctx := context.Background()
	stream, err := w.rdb.XLen(ctx, "rpr:v1:{"+jobsService+"}:req").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		w.t.Fatal(err)
	}
	retry, err = w.rdb.ZCard(ctx, "rpr:v1:{"+jobsService+"}:retry").Result()
	if err != nil {
		w.t.Fatal(err)
	}
	return stream, retry
}

func TestAsyncRequestsRunOnceEach(t *testing.T) {
	w := newAsyncWorld(t, tunnel.ClientOptions{})
	stop := w.serve(tunnel.ServerOptions{})
	const n = 200
	ids := map[string]bool{}
	for i := range n {
		r, err := w.enqueue("Do", strconv.Itoa(i))
		if err != nil {
			t.Fatalf("enqueue %d: %v", i, err)
		}
		if r.RequestID == "" || r.IdempotencyKey != r.RequestID || ids[r.RequestID] {
			t.Fatalf("receipt %+v: want a fresh request id, also as the key", r)
		}
		ids[r.RequestID] = true
	}
	waitFor(t, "all requests to run", func() bool { return w.jobs.distinct() == n })
	// Once the stream and the retry set are empty nothing is left to run;
	// once the server has stopped, no handler can still be starting.
	waitFor(t, "the queue to empty", func() bool { s, r := w.queued(); return s == 0 && r == 0 })
	stop()
	for i := range n {
		if c := w.jobs.count(strconv.Itoa(i)); c != 1 {
			t.Errorf("request %d ran %d times, want 1", i, c)
		}
	}
	if dl := w.deadLetters(); len(dl) != 0 {
		t.Errorf("%d dead letters, want none", len(dl))
	}
}

func TestAsyncRetriesThenDeadLetters(t *testing.T) {
	w := newAsyncWorld(t, tunnel.ClientOptions{})
	w.jobs.setFunc(func(ctx context.Context, in *wrapperspb.StringValue) error {
		return tunnel.Errorf(tunnel.Unavailable, "downstream is down")
	})
	w.serve(tunnel.ServerOptions{})
	r, err := w.enqueue("Do", "poison")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a dead letter", func() bool { return len(w.deadLetters()) == 1 })
	if got := w.jobs.count("poison"); got != fastRetry.MaxAttempts {
		t.Errorf("ran %d times, want %d (the policy's attempts)", got, fastRetry.MaxAttempts)
	}
	w.jobs.mu.Lock()
	attempts := fmt.Sprint(w.jobs.attempts["poison"])
	w.jobs.mu.Unlock()
	if attempts != "[1 2 3]" {
		t.Errorf("attempts seen by the handler %s, want [1 2 3]", attempts)
	}
	dl := w.deadLetters()[0].Values
	for field, want := range map[string]string{
		"id": r.RequestID, "key": r.IdempotencyKey, "method": jobsService + "/Do",
		"code": "UNAVAILABLE", "error": "downstream is down", "attempts": "3",
		"reason": "attempts exhausted (3 of 3)",
	} {
		if dl[field] != want {
			t.Errorf("dead letter field %s = %q, want %q", field, dl[field], want)
		}
	}
	for _, field := range []string{"e", "failed_ms", "enqueued_ms", "worker", "entry"} {
		if dl[field] == nil || dl[field] == "" {
			t.Errorf("dead letter has no %s field: %v", field, dl)
		}
	}
	if s, rs := w.queued(); s != 0 || rs != 0 {
		t.Errorf("after dead-lettering: %d in the stream, %d in the retry set; want none", s, rs)
	}
}

func TestAsyncPermanentErrorsDeadLetterAtOnce(t *testing.T) {
	w := newAsyncWorld(t, tunnel.ClientOptions{})
	w.jobs.setFunc(func(ctx context.Context, in *wrapperspb.StringValue) error {
		switch in.GetValue() {
		case "permanent":
			return tunnel.Permanent(errors.New("customer does not exist"))
		case "invalid":
			return tunnel.Errorf(tunnel.InvalidArgument, "bad order")
		}
		return nil
	})
	w.serve(tunnel.ServerOptions{})
	for _, v := range []string{"permanent", "invalid"} {
		if _, err := w.enqueue("Do", v); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "two dead letters", func() bool { return len(w.deadLetters()) == 2 })
	reasons := map[string]string{}
	for _, m := range w.deadLetters() {
		reasons[m.Values["code"].(string)] = m.Values["reason"].(string)
	}
	if reasons["UNKNOWN"] != "permanent error (tunnel.Permanent)" || reasons["INVALID_ARGUMENT"] != "code INVALID_ARGUMENT is not retryable" {
		t.Errorf("reasons by code: %v", reasons)
	}
	if w.jobs.count("permanent") != 1 || w.jobs.count("invalid") != 1 {
		t.Errorf("runs: permanent %d, invalid %d; want 1 each", w.jobs.count("permanent"), w.jobs.count("invalid"))
	}
}

func TestAsyncIdempotencyKeyRunsOnce(t *testing.T) {
	w := newAsyncWorld(t, tunnel.ClientOptions{})
	w.serve(tunnel.ServerOptions{})
	for i := range 5 {
		r, err := w.enqueue("Do", "charge", tunnel.WithIdempotencyKey("order-42"))
		if err != nil {
			t.Fatal(err)
		}
		if r.IdempotencyKey != "order-42" {
			t.Fatalf("receipt %d key %q", i, r.IdempotencyKey)
		}
	}
	waitFor(t, "the queue to empty", func() bool { s, r := w.queued(); return s == 0 && r == 0 })
	if got := w.jobs.count("charge"); got != 1 {
		t.Errorf("5 requests with one idempotency key ran %d times, want 1", got)
	}
	ttl, err := w.rdb.PTTL(context.Background(), "rpr:v1:{"+jobsService+"}:st:order-42").Result()
	if err != nil || ttl < 23*time.Hour {
		t.Errorf("done marker TTL %v (%v), want about the 24h default window", ttl, err)
	}
}

func TestAsyncDelayedRunsNoEarlier(t *testing.T) {
	w := newAsyncWorld(t, tunnel.ClientOptions{})
	w.serve(tunnel.ServerOptions{})
	delays := map[string]time.Duration{"now": 0, "soon": 300 * time.Millisecond, "later": 800 * time.Millisecond}
	due := map[string]time.Time{}
	for name, d := range delays {
		r, err := w.enqueue("Do", name, tunnel.WithDelay(d))
		if err != nil {
			t.Fatal(err)
		}
		due[name] = r.ProcessAt
	}
	r, err := w.enqueue("Do", "at", tunnel.WithProcessAt(time.Now().Add(500*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	due["at"] = r.ProcessAt
	waitFor(t, "all four to run", func() bool { return w.jobs.distinct() == 4 })
	w.jobs.mu.Lock()
	defer w.jobs.mu.Unlock()
	for name, when := range due {
		// Clock offsets between this process and Redis are measured, so a
		// small allowance covers the measurement's error only.
		if ran := w.jobs.at[name]; ran.Before(when.Add(-10 * time.Millisecond)) {
			t.Errorf("%s ran at %v, before it was due at %v", name, ran.Format(time.StampMilli), when.Format(time.StampMilli))
		}
	}
}

func TestAsyncOverflowIsRefusedNotDropped(t *testing.T) {
	const capacity = 50
	w := newAsyncWorld(t, tunnel.ClientOptions{MaxBacklog: capacity})
	var accepted, refused int
	for i := range 2 * capacity {
		_, err := w.enqueue("Do", strconv.Itoa(i))
		switch {
		case err == nil:
			accepted++
		case tunnel.CodeOf(err) == tunnel.ResourceExhausted && tunnel.NotExecuted(err):
			refused++
			if after, ok := tunnel.RetryAfter(err); !ok || after <= 0 {
				t.Errorf("refusal without a retry-after hint: %v", err)
			}
			if r := tunnel.ErrorReason(err); r != tunnel.ReasonQueueFull {
				t.Errorf("reason %q, want %s: %v", r, tunnel.ReasonQueueFull, err)
			}
		default:
			t.Fatalf("enqueue %d: %v", i, err)
		}
	}
	if accepted+refused != 2*capacity || accepted > capacity || refused == 0 {
		t.Fatalf("accepted %d, refused %d of %d with a cap of %d", accepted, refused, 2*capacity, capacity)
	}
	stream, _ := w.queued()
	if stream != int64(accepted) {
		t.Fatalf("%d requests in the stream, but %d were accepted", stream, accepted)
	}
	w.serve(tunnel.ServerOptions{})
	waitFor(t, "every accepted request to run", func() bool { return w.jobs.distinct() == accepted })
	waitFor(t, "the queue to empty", func() bool { s, r := w.queued(); return s == 0 && r == 0 })
	if n := len(w.deadLetters()); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
}

func TestDeadLettersReplayAfterFix(t *testing.T) {
	w := newAsyncWorld(t, tunnel.ClientOptions{})
	var broken atomic.Bool // every request fails until the fix is deployed
	broken.Store(true)
	w.jobs.setFunc(func(ctx context.Context, in *wrapperspb.StringValue) error {
		if broken.Load() {
			return tunnel.Errorf(tunnel.Unavailable, "still broken")
		}
		return nil
	})
	w.serve(tunnel.ServerOptions{})
	const n = 5
	for i := range n {
		if _, err := w.enqueue("Do", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "five dead letters", func() bool { return len(w.deadLetters()) == n })

	dlq := admin.New(w.rdb, admin.Options{}).Service(jobsService).DeadLetters()
	letters, err := dlq.List(context.Background(), admin.DeadLetterFilter{Method: "Do", Code: tunnel.Unavailable}, 0)
	if err != nil || len(letters) != n {
		t.Fatalf("List: %d letters, %v; want %d", len(letters), err, n)
	}
	for _, dl := range letters {
		in := new(wrapperspb.StringValue)
		if !dl.Async || dl.Attempts != 3 || proto.Unmarshal(dl.Payload, in) != nil || in.GetValue() == "" {
			t.Errorf("letter %+v", dl)
		}
	}
	if got, err := dlq.Get(context.Background(), letters[1].RequestID); err != nil || got.EntryID != letters[1].EntryID {
		t.Errorf("Get by request id: %+v, %v", got, err)
	}

	broken.Store(false) // the fix is deployed
	var progress []int
	res, err := dlq.Replay(context.Background(), letters, func(done int) { progress = append(progress, done) })
	if err != nil || res.Replayed != n || len(res.Skipped) != 0 {
		t.Fatalf("Replay: %+v, %v", res, err)
	}
	if len(progress) == 0 || progress[len(progress)-1] != n {
		t.Errorf("progress %v, want it to end at %d", progress, n)
	}
	waitFor(t, "the queue to empty", func() bool { s, r := w.queued(); return s == 0 && r == 0 })
	for i := range n {
		// 3 failed attempts, then one after the replay.
		if got := w.jobs.count(strconv.Itoa(i)); got != 4 {
			t.Errorf("request %d ran %d times, want 4", i, got)
		}
	}
	if left, _ := dlq.Len(context.Background()); left != 0 {
		t.Errorf("%d dead letters left after the replay", left)
	}
	// Replaying again finds nothing to do.
	res, err = dlq.Replay(context.Background(), letters, nil)
	if err != nil || res.Gone != n {
		t.Errorf("second Replay: %+v, %v; want all gone", res, err)
	}
}

// TestAsyncDoneMarkerIsSmall checks what a succeeded key keeps for the
// idempotency window: the state, without an earlier attempt's error.
func TestAsyncDoneMarkerIsSmall(t *testing.T) {
	w := newAsyncWorld(t, tunnel.ClientOptions{})
	w.jobs.setFunc(func(ctx context.Context, in *wrapperspb.StringValue) error {
		if k := tunnel.IdempotencyKeyFromContext(ctx); k != "k-1" && k != "k-2" {
			return tunnel.Permanent(fmt.Errorf("handler sees idempotency key %q", k))
		}
		if tunnel.AttemptFromContext(ctx) == 1 {
			return tunnel.Errorf(tunnel.Unavailable, "first attempt fails with a long message: %0200d", 0)
		}
		return nil
	})
	w.serve(tunnel.ServerOptions{})
	r, err := w.enqueue("Do", "twice", tunnel.WithIdempotencyKey("k-1"))
	if err != nil {
		t.Fatal(err)
	}
	key := "rpr:v1:{" + jobsService + "}:st:" + r.IdempotencyKey
	ctx := context.Background()
	waitFor(t, "the key to succeed", func() bool { return w.rdb.HGet(ctx, key, "state").Val() == "SUCCESS" })
	if w.rdb.HExists(ctx, key, "resp").Val() {
		t.Errorf("the done marker still holds the first attempt's error")
	}
	if _, err := w.enqueue("Do", "once", tunnel.WithIdempotencyKey("k-2")); err != nil {
		t.Fatal(err)
	}
	key2 := "rpr:v1:{" + jobsService + "}:st:k-2"
	waitFor(t, "the second key to succeed", func() bool { return w.rdb.HGet(ctx, key2, "state").Val() == "SUCCESS" })
	for _, k := range []string{key, key2} {
		size, err := w.rdb.MemoryUsage(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("done marker %s: %d bytes (MEMORY USAGE)", k, size)
		if size > 250 { // the README budgets about 150 bytes per key
			t.Errorf("done marker %s takes %d bytes, want about 150", k, size)
		}
	}
}
