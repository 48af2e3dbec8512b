package faulttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/logcapture"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// world is one test's Redis, with a connection for inspecting it.
type world struct {
	t     *testing.T
	redis *redistest.Server
	rdb   *redis.Client // the test's own connection, for inspection
}

func newWorld(t *testing.T, opts ...redistest.Option) *world {
	t.Helper()
	rs := redistest.Start(t, opts...)
	return &world{t: t, redis: rs, rdb: rs.Client(t)}
}

// shortCtx bounds one round of inspection commands.
func shortCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// execs returns executions per request id, as recorded by the handlers.
func (w *world) execs() map[string]int {
	w.t.Helper()
	return w.intHash(execsKey)
}

// intHash reads a hash of integers.
func (w *world) intHash(key string) map[string]int {
	w.t.Helper()
	ctx, cancel := shortCtx()
	defer cancel()
	raw, err := w.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		w.t.Fatalf("reading %s: %v", key, err)
	}
	out := make(map[string]int, len(raw))
	for k, v := range raw {
		n, err := strconv.Atoi(v)
		if err != nil {
			w.t.Fatalf("%s[%s] = %q", key, k, v)
		}
		out[k] = n
	}
	return out
}

// runs returns the handlers' start/done/stop records.
func (w *world) runs() runIndex {
	w.t.Helper()
	return w.runsIn(runsKey)
}

// runsIn reads the start/done/stop records handlers pushed to key.
func (w *world) runsIn(key string) runIndex {
	w.t.Helper()
	ctx, cancel := shortCtx()
	defer cancel()
	lines, err := w.rdb.LRange(ctx, key, 0, -1).Result()
	if err != nil {
		w.t.Fatalf("reading %s: %v", key, err)
	}
	events, err := parseRuns(lines)
	if err != nil {
		w.t.Fatal(err)
	}
	return indexRuns(events)
}

// state returns the state-machine hash of a request (empty if none).
func (w *world) state(rid string) map[string]string {
	w.t.Helper()
	ctx, cancel := shortCtx()
	defer cancel()
	st, err := w.rdb.HGetAll(ctx, stateKey(rid)).Result()
	if err != nil {
		w.t.Fatalf("reading %s: %v", stateKey(rid), err)
	}
	return st
}

// backlog describes what the request stream still holds for the workers.
type backlog struct {
	pending     int64 // delivered, not acknowledged
	undelivered int   // entries after the group's last-delivered id
}

func (b backlog) empty() bool { return b.pending == 0 && b.undelivered == 0 }

func (w *world) backlog(ctx context.Context) (backlog, error) {
	var b backlog
	p, err := w.rdb.XPending(ctx, requestStream, "workers").Result()
	if err != nil {
		return b, fmt.Errorf("XPENDING %s workers: %w", requestStream, err)
	}
	b.pending = p.Count
	groups, err := w.rdb.XInfoGroups(ctx, requestStream).Result()
	if err != nil {
		return b, fmt.Errorf("XINFO GROUPS %s: %w", requestStream, err)
	}
	var lastDelivered string
	for _, g := range groups {
		if g.Name == "workers" {
			lastDelivered = g.LastDeliveredID
		}
	}
	// Entries are few (the runtime deletes the ones it retires); count
	// those after the last delivered id.
	rest, err := w.rdb.XRange(ctx, requestStream, "("+lastDelivered, "+").Result()
	if err != nil {
		return b, fmt.Errorf("XRANGE %s: %w", requestStream, err)
	}
	b.undelivered = len(rest)
	return b, nil
}

// drained waits until the workers have taken and acknowledged every
// request, within timeout (a bound on a hang, not a performance claim).
func (w *world) drained(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		b, err := w.backlog(ctx)
		cancel()
		if err == nil && b.empty() {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("request stream not drained after %v: %w", timeout, err)
			}
			return fmt.Errorf("request stream not drained after %v: %d entries pending, %d never delivered", timeout, b.pending, b.undelivered)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitDrained is drained, failing the test at once.
func (w *world) waitDrained(timeout time.Duration) {
	w.t.Helper()
	if err := w.drained(timeout); err != nil {
		w.t.Fatal(err)
	}
}

// waitUntil polls cond (a condition on the test's world, not the code under
// test) every 10 ms until it holds, failing the test after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// localServer is a tunnel.Server in the test process.
type localServer struct {
	t      *testing.T
	logs   *logBuffer // the server's log, Info and up
	srv    *tunnel.Server
	rdb    redis.UniversalClient
	rec    *redis.Client
	cancel context.CancelFunc
	served chan error
	once   sync.Once
	err    error
}

// startLocalServer runs a server for fault.v1.Work in this process and
// waits for its first heartbeat. Stop (also run at cleanup) shuts it down.
func (w *world) startLocalServer(opts tunnel.ServerOptions) *localServer {
	w.t.Helper()
	logs := &logBuffer{}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	ctx, cancel := shortCtx()
	defer cancel()
	rdb, err := tunnel.Open(ctx, w.redis.URL())
	if err != nil {
		w.t.Fatal(err)
	}
	rec, err := newRecorder(w.redis.URL())
	if err != nil {
		w.t.Fatal(err)
	}
	srv, err := tunnel.NewServer(rdb, opts)
	if err != nil {
		w.t.Fatal(err)
	}
	srv.RegisterService(&workDesc, &work{rec: rec, worker: srv.WorkerID(), log: opts.Logger})
	s := &localServer{t: w.t, logs: logs, srv: srv, rdb: rdb, rec: rec, served: make(chan error, 1)}
	serveCtx, stop := context.WithCancel(context.Background())
	s.cancel = stop
	go func() { s.served <- srv.Serve(serveCtx) }()
	w.t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			w.t.Error(err)
		}
		if showLogs() {
			w.t.Logf("server log:\n%s", logs.String())
			return
		}
		if w.t.Failed() {
			w.t.Logf("server log (end):\n%s", tailLines(logs.String(), 40))
			return
		}
		// Warnings are the runtime's account of the faults: show a few.
		if warns := logs.Lines("level=WARN"); len(warns) > 0 {
			w.t.Logf("server logged %d warnings, e.g.:\n%s", len(warns), strings.Join(warns[:min(len(warns), 3)], "\n"))
		}
		if errs := logs.Lines("level=ERROR"); len(errs) > 0 {
			w.t.Logf("server logged %d errors, e.g.:\n%s", len(errs), strings.Join(errs[:min(len(errs), 3)], "\n"))
		}
	})
	waitUntil(w.t, 20*time.Second, "the local server's heartbeat", func() bool {
		ctx, cancel := shortCtx()
		defer cancel()
		ok, _ := w.rdb.HExists(ctx, workersHash, srv.WorkerID()).Result()
		return ok
	})
	return s
}

// Stop ends Serve (graceful: calls in flight are answered), waits for it to
// return and closes the server's Redis clients. It returns Serve's error.
func (s *localServer) Stop() error {
	s.once.Do(func() {
		s.cancel()
		select {
		case s.err = <-s.served:
		case <-time.After(30 * time.Second):
			s.err = errors.New("Serve did not return 30s after its context ended")
		}
		_ = s.rdb.Close()
		_ = s.rec.Close()
	})
	return s.err
}

// localClient is a tunnel.Client in the test process, with its log kept for
// inspection.
type localClient struct {
	t      *testing.T
	client *tunnel.Client
	rdb    redis.UniversalClient
	logs   *logBuffer
	once   sync.Once
}

func (w *world) newClient(opts tunnel.ClientOptions) *localClient {
	w.t.Helper()
	logs := &logBuffer{}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if opts.BizCode == "" {
		opts.BizCode = bizCode
	}
	ctx, cancel := shortCtx()
	defer cancel()
	rdb, err := tunnel.Open(ctx, w.redis.URL())
	if err != nil {
		w.t.Fatal(err)
	}
	client, err := tunnel.NewClient(rdb, opts)
	if err != nil {
		w.t.Fatal(err)
	}
	c := &localClient{t: w.t, client: client, rdb: rdb, logs: logs}
	w.t.Cleanup(func() {
		c.Close()
		if showLogs() {
			w.t.Logf("client log:\n%s", logs.String())
		} else if w.t.Failed() {
			w.t.Logf("client log (end):\n%s", tailLines(logs.String(), 30))
		}
	})
	return c
}

// Close closes the client and then its Redis client.
func (c *localClient) Close() {
	c.once.Do(func() {
		if err := c.client.Close(); err != nil {
			c.t.Logf("client Close: %v", err)
		}
		_ = c.rdb.Close()
	})
}

// outcome is what one call returned, with its request id.
type outcome struct {
	method     *tunnel.MethodDesc
	in         string
	timeout    time.Duration
	rid        string
	reply      string
	err        error
	start, end time.Time
}

func (o outcome) code() tunnel.Code { return tunnel.CodeOf(o.err) }
func (o outcome) took() time.Duration {
	return o.end.Sub(o.start)
}

func (o outcome) String() string {
	return fmt.Sprintf("%s(%q) [%s] after %v: %v", o.method.Name, o.in, o.rid, o.took().Round(time.Millisecond), o.err)
}

// call makes one call with the given timeout and records its outcome.
func (c *localClient) call(m *tunnel.MethodDesc, in string, timeout time.Duration) outcome {
	o := outcome{method: m, in: in, timeout: timeout, start: time.Now()}
	out := new(wrapperspb.StringValue)
	o.err = c.client.Invoke(context.Background(), m, wrapperspb.String(in), out,
		tunnel.WithTimeout(timeout), tunnel.CaptureRequestID(&o.rid))
	o.end = time.Now()
	o.reply = out.GetValue()
	return o
}

// callsRunning is a batch of concurrent calls.
type callsRunning struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	outs []outcome
	done chan struct{}
}

// goCalls starts n concurrent calls; in(i) gives the i-th request value.
func (c *localClient) goCalls(n int, m *tunnel.MethodDesc, timeout time.Duration, in func(i int) string) *callsRunning {
	r := &callsRunning{done: make(chan struct{})}
	r.wg.Add(n)
	for i := range n {
		go func() {
			defer r.wg.Done()
			o := c.call(m, in(i), timeout)
			r.mu.Lock()
			r.outs = append(r.outs, o)
			r.mu.Unlock()
		}()
	}
	go func() {
		r.wg.Wait()
		close(r.done)
	}()
	return r
}

// wait waits for every call, failing the test after timeout (calls have
// deadlines, so only a hang can exhaust it).
func (r *callsRunning) wait(t *testing.T, timeout time.Duration) []outcome {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		r.mu.Lock()
		n := len(r.outs)
		r.mu.Unlock()
		t.Fatalf("calls still running after %v (%d returned): a call hangs past its deadline", timeout, n)
	}
	return r.outs
}

// finished reports how many calls have returned.
func (r *callsRunning) finished() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.outs)
}

// tally counts outcomes.
type tally struct {
	byCode      map[tunnel.Code]int
	notExecuted int // failed calls with tunnel.NotExecuted(err)
	noID        int // failed before a request id was made
	twice       int // ids executed more than once
}

func (t tally) String() string {
	codes := make([]string, 0, len(t.byCode))
	for c, n := range t.byCode {
		codes = append(codes, fmt.Sprintf("%s=%d", c, n))
	}
	sort.Strings(codes)
	return fmt.Sprintf("%s (not executed: %d, no request id: %d, executed more than once: %d)",
		strings.Join(codes, " "), t.notExecuted, t.noID, t.twice)
}

// checkOutcomes applies the rules every fault test shares to outs, given the
// executions recorded in Redis once everything settled:
//
//   - every outcome's code is one of allowed;
//   - a call that succeeded answered its own request id, and ran exactly
//     once (non-idempotent) or at least once (idempotent);
//   - a call that failed with NotExecuted(err) never ran;
//   - a non-idempotent request never ran more than once;
//   - every execution belongs to one of the calls.
//
// A call may lack a request id only if it failed before one was made.
func checkOutcomes(t *testing.T, outs []outcome, execs map[string]int, allowed ...tunnel.Code) tally {
	t.Helper()
	tl := tally{byCode: map[tunnel.Code]int{}}
	ids := map[string]bool{}
	for _, o := range outs {
		code := o.code()
		tl.byCode[code]++
		if !slices.Contains(allowed, code) {
			t.Errorf("call %v: code %s, want one of %v", o, code, allowed)
		}
		if o.rid == "" {
			tl.noID++
			if o.err == nil {
				t.Errorf("call %v succeeded but CaptureRequestID got no id", o)
			}
			continue
		}
		if ids[o.rid] {
			t.Errorf("request id %s used by two calls", o.rid)
		}
		ids[o.rid] = true
		n := execs[o.rid]
		if n > 1 {
			tl.twice++
		}
		if !o.method.Idempotent && n > 1 {
			t.Errorf("call %v: non-idempotent %s executed %d times", o, o.method.Name, n)
		}
		switch {
		case o.err == nil:
			if o.reply != o.rid {
				t.Errorf("call %v: reply %q is not its own request id", o, o.reply)
			}
			if n == 0 {
				t.Errorf("call %v succeeded but its handler never ran", o)
			}
		case tunnel.NotExecuted(o.err):
			tl.notExecuted++
			if n != 0 {
				t.Errorf("call %v: NotExecuted(err) is true but its handler ran %d time(s)", o, n)
			}
		}
	}
	for rid, n := range execs {
		if !ids[rid] {
			t.Errorf("request %s executed %d time(s) but no call of this test has that id", rid, n)
		}
	}
	return tl
}

// hangSlack is how far past its deadline (plus any stall the test makes) a
// call may return before a test calls it hung. A call adds at most one
// bounded arbiter round trip (0.5 s) after its deadline; the rest is room
// for a starved CI machine, so this bound catches hangs, not slowness.
const hangSlack = 10 * time.Second

// logBuffer collects log output for assertions.
type logBuffer = logcapture.Buffer

// envShowLogs, when set, makes every test log the full output of its
// servers and clients, in-process or not (with -v, or on failure).
const envShowLogs = "RPR_FAULT_LOGS"

func showLogs() bool { return os.Getenv(envShowLogs) != "" }

// idLess compares two stream entry ids ("ms-seq").
func idLess(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	if am != bm {
		return am < bm
	}
	return as < bs
}

func splitID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
