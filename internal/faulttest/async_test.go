package faulttest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

// Async (fire-and-forget) requests under worker crashes. The service is
// fault.v1.Jobs, hand-written like generated code, served by server
// processes in the role "async-server" (the test binary re-executed, as in
// main_test.go). Its handlers take the request value as the request's
// idempotency key (the test enqueues each with WithIdempotencyKey(value))
// and record, in the test's Redis:
//
//	HINCRBY rprtest:async:execs  <key> 1            executions per key
//	RPUSH   rprtest:async:runs   "start|done|stop <worker> <key>"
//	HSET    rprtest:async:first  <key> <unix ms>    (NX) when it first started
//
// then sleep RPR_FAULT_ASYNC_SLEEP, then apply their effect and count it:
//
//	Apply (idempotent):      HSETNX  rprtest:async:effect <key> <worker>
//	                         (applying it twice changes nothing)
//	Charge (not idempotent): HINCRBY rprtest:async:effect <key> 1
//	                         (each run charges again)
//	INCR rprtest:async:done                         handlers finished
const (
	jobsService = "fault.v1.Jobs"

	roleAsyncServer = "async-server"
	envAsyncSleep   = "RPR_FAULT_ASYNC_SLEEP" // async server: handler time ("50ms")

	asyncExecsKey  = "rprtest:async:execs"
	asyncRunsKey   = "rprtest:async:runs"
	asyncFirstKey  = "rprtest:async:first"
	asyncEffectKey = "rprtest:async:effect"
	asyncDoneKey   = "rprtest:async:done"

	jobsStream = "rpr:v1:{" + jobsService + "}:req"
	jobsRetry  = "rpr:v1:{" + jobsService + "}:retry"
	jobsDLQ    = "rpr:v1:{" + jobsService + "}:dlq"
	jobsStates = "rpr:v1:{" + jobsService + "}:st:*"
)

func jobsStateKey(key string) string { return "rpr:v1:{" + jobsService + "}:st:" + key }

func init() { extraRoles[roleAsyncServer] = asyncServerRole }

// jobsServer is the server API of fault.v1.Jobs.
type jobsServer interface {
	// Apply is idempotent: a request whose worker died mid-run runs again.
	Apply(context.Context, *wrapperspb.StringValue) error
	// Charge is not: a request whose worker died mid-run is dead-lettered
	// ("outcome unknown"), never run again silently.
	Charge(context.Context, *wrapperspb.StringValue) error
}

// jobsRetryPolicy keeps retries (of a failed bookkeeping write, say) quick.
var jobsRetryPolicy = &tunnel.RetryPolicy{MaxAttempts: 5, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}

func jobsHandler(name string, call func(jobsServer, context.Context, *wrapperspb.StringValue) error) func(any, context.Context, func(proto.Message) error, tunnel.UnaryServerInterceptor) (proto.Message, error) {
	return func(srv any, ctx context.Context, decode func(proto.Message) error, interceptor tunnel.UnaryServerInterceptor) (proto.Message, error) {
		in := new(wrapperspb.StringValue)
		if err := decode(in); err != nil {
			return nil, err
		}
		run := func(ctx context.Context, req proto.Message) (proto.Message, error) {
			return nil, call(srv.(jobsServer), ctx, req.(*wrapperspb.StringValue))
		}
		if interceptor == nil {
			return run(ctx, in)
		}
		return interceptor(ctx, in, &tunnel.UnaryServerInfo{Server: srv, FullMethod: jobsService + "/" + name}, run)
	}
}

var jobsInfo = tunnel.ServiceInfo{Name: jobsService}

var jobsDesc = tunnel.ServiceDesc{
	Service:     &jobsInfo,
	HandlerType: (*jobsServer)(nil),
	Methods: []tunnel.MethodDesc{
		{Service: &jobsInfo, Name: "Apply", Async: true, Idempotent: true, Retry: jobsRetryPolicy,
			Handler: jobsHandler("Apply", jobsServer.Apply)},
		{Service: &jobsInfo, Name: "Charge", Async: true, Idempotent: false, Retry: jobsRetryPolicy,
			Handler: jobsHandler("Charge", jobsServer.Charge)},
	},
	File: "fault/v1/jobs.proto",
}

var (
	applyMethod  = &jobsDesc.Methods[0]
	chargeMethod = &jobsDesc.Methods[1]
)

// asyncJobs implements jobsServer; see the comment at the top.
type asyncJobs struct {
	rec    redis.UniversalClient
	worker string
	sleep  time.Duration
}

func (j *asyncJobs) Apply(ctx context.Context, in *wrapperspb.StringValue) error {
	return j.run(ctx, in, func(ctx context.Context, p redis.Pipeliner, key string) {
		p.HSetNX(ctx, asyncEffectKey, key, j.worker)
	})
}

func (j *asyncJobs) Charge(ctx context.Context, in *wrapperspb.StringValue) error {
	return j.run(ctx, in, func(ctx context.Context, p redis.Pipeliner, key string) {
		p.HIncrBy(ctx, asyncEffectKey, key, 1)
	})
}

func (j *asyncJobs) run(ctx context.Context, in *wrapperspb.StringValue, effect func(context.Context, redis.Pipeliner, string)) error {
	key := in.GetValue()
	// Bookkeeping outlives the attempt's context: a started execution is
	// counted whatever happens next.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	pipe := j.rec.TxPipeline()
	pipe.HIncrBy(rctx, asyncExecsKey, key, 1)
	pipe.RPush(rctx, asyncRunsKey, "start "+j.worker+" "+key)
	pipe.HSetNX(rctx, asyncFirstKey, key, time.Now().UnixMilli())
	if _, err := pipe.Exec(rctx); err != nil {
		return tunnel.Errorf(tunnel.Unavailable, "[%s] record execution: %v", key, err)
	}
	t := time.NewTimer(j.sleep)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		_ = j.rec.RPush(rctx, asyncRunsKey, "stop "+j.worker+" "+key).Err()
		return tunnel.NewError(tunnel.CodeOf(ctx.Err()), ctx.Err())
	}
	pipe = j.rec.TxPipeline()
	effect(rctx, pipe, key)
	pipe.RPush(rctx, asyncRunsKey, "done "+j.worker+" "+key)
	pipe.Incr(rctx, asyncDoneKey)
	if _, err := pipe.Exec(rctx); err != nil {
		return tunnel.Errorf(tunnel.Unavailable, "[%s] apply effect: %v", key, err)
	}
	return nil
}

// asyncServerRole serves fault.v1.Jobs until SIGTERM, like serverRole
// serves fault.v1.Work; each handler takes RPR_FAULT_ASYNC_SLEEP.
func asyncServerRole() int {
	sleep, err := time.ParseDuration(os.Getenv(envAsyncSleep))
	if err != nil {
		roleLogger().Error("faulttest async server: " + envAsyncSleep + " must be a duration: " + err.Error())
		return 1
	}
	return runServerRole("async server", "rpr:v1:{"+jobsService+"}:workers",
		tunnel.ServerOptions{RetryPollInterval: 50 * time.Millisecond},
		func(srv *tunnel.Server, rec *redis.Client, worker string, _ *slog.Logger) {
			srv.RegisterService(&jobsDesc, &asyncJobs{rec: rec, worker: worker, sleep: sleep})
		})
}

// startAsyncServer starts an async-server process and waits until it is
// ready.
func startAsyncServer(t *testing.T, redisURL string, c serverConfig, sleep time.Duration) *proc {
	t.Helper()
	env := []string{envRole + "=" + roleAsyncServer, envRedisURL + "=" + redisURL, envWorker + "=" + c.worker,
		envAsyncSleep + "=" + sleep.String()}
	if c.lease > 0 {
		env = append(env, envLease+"="+c.lease.String())
	}
	if c.concurrency > 0 {
		env = append(env, envConcurrency+"="+strconv.Itoa(c.concurrency))
	}
	p := startProc(t, "async server "+c.worker, env...)
	p.waitMarker(markerReady, 60*time.Second)
	return p
}

// asyncLedgerScript reads, in one atomic step, where fault.v1.Jobs's
// requests are: keys whose state is SUCCESS or DEAD, and entries in the
// request stream (new or running), the retry set and the dead-letter
// stream. The runtime moves a request between these in single scripts, so
// every accepted request is in exactly one of processed, dead-lettered
// and queued at any instant. (Test bookkeeping: it reads keys it was not
// given, which a standalone Redis allows.)
//
//	KEYS[1] request stream   KEYS[2] retry set   KEYS[3] dead-letter stream
//	ARGV[1] pattern of the state hashes
var asyncLedgerScript = redis.NewScript(`
local success, dead, cursor = 0, 0, '0'
repeat
  local r = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = r[1]
  for _, k in ipairs(r[2]) do
    local st = redis.call('HGET', k, 'state')
    if st == 'SUCCESS' then success = success + 1 elseif st == 'DEAD' then dead = dead + 1 end
  end
until cursor == '0'
return {success, dead, redis.call('XLEN', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('XLEN', KEYS[3])}
`)

type asyncLedger struct {
	processed, deadStates, stream, retry, dlq int64
}

func (l asyncLedger) total() int64 { return l.processed + l.dlq + l.stream + l.retry }

func (l asyncLedger) String() string {
	return fmt.Sprintf("processed %d + dead-lettered %d + queued %d (stream %d, retry set %d) = %d",
		l.processed, l.dlq, l.stream+l.retry, l.stream, l.retry, l.total())
}

func (w *world) asyncLedger() asyncLedger {
	w.t.Helper()
	ctx, cancel := shortCtx()
	defer cancel()
	v, err := asyncLedgerScript.Run(ctx, w.rdb, []string{jobsStream, jobsRetry, jobsDLQ}, jobsStates).Int64Slice()
	if err != nil || len(v) != 5 {
		w.t.Fatalf("ledger snapshot: %v %v", v, err)
	}
	return asyncLedger{processed: v[0], deadStates: v[1], stream: v[2], retry: v[3], dlq: v[4]}
}

// checkAsyncLedger asserts accepted = processed + dead-lettered + queued on
// a fresh snapshot, and that every dead letter's key is in state DEAD.
func (w *world) checkAsyncLedger(when string, accepted int) asyncLedger {
	w.t.Helper()
	l := w.asyncLedger()
	switch {
	case l.total() != int64(accepted):
		w.t.Errorf("%s: accepted %d != %v", when, accepted, l)
	case l.deadStates != l.dlq:
		w.t.Errorf("%s: %d keys in state DEAD but %d dead letters", when, l.deadStates, l.dlq)
	default:
		w.t.Logf("%s: accepted %d = %v", when, accepted, l)
	}
	return l
}

// asyncRuns returns the async handlers' start/done/stop records.
func (w *world) asyncRuns() runIndex {
	w.t.Helper()
	return w.runsIn(asyncRunsKey)
}

// jobStates returns the state of each key's state hash ("" when none).
func (w *world) jobStates(keys []string) map[string]string {
	w.t.Helper()
	ctx, cancel := shortCtx()
	defer cancel()
	pipe := w.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGet(ctx, jobsStateKey(k), "state")
	}
	_, _ = pipe.Exec(ctx)
	out := make(map[string]string, len(keys))
	for i, k := range keys {
		out[k] = cmds[i].Val()
	}
	return out
}

// deadLetter is the part of a dead-letter entry the tests judge.
type deadLetter struct{ key, reason, code, attempts, worker string }

func (w *world) jobDeadLetters() []deadLetter {
	w.t.Helper()
	ctx, cancel := shortCtx()
	defer cancel()
	msgs, err := w.rdb.XRange(ctx, jobsDLQ, "-", "+").Result()
	if err != nil {
		w.t.Fatalf("reading %s: %v", jobsDLQ, err)
	}
	out := make([]deadLetter, len(msgs))
	for i, m := range msgs {
		s := func(f string) string { v, _ := m.Values[f].(string); return v }
		out[i] = deadLetter{key: s("key"), reason: s("reason"), code: s("code"), attempts: s("attempts"), worker: s("worker")}
	}
	return out
}

// enqueueJobs enqueues n requests of m from 8 goroutines, each with its
// value as idempotency key, extra options added; it returns the keys.
func enqueueJobs(t *testing.T, c *localClient, m *tunnel.MethodDesc, prefix string, n int, opts func(i int) []tunnel.CallOption) []string {
	t.Helper()
	keys := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	const senders = 8
	for g := range senders {
		wg.Go(func() {
			for i := g; i < n; i += senders {
				keys[i] = fmt.Sprintf("%s-%05d", prefix, i)
				o := []tunnel.CallOption{tunnel.WithIdempotencyKey(keys[i])}
				if opts != nil {
					o = append(o, opts(i)...)
				}
				var r tunnel.Receipt
				r, errs[i] = c.client.Enqueue(context.Background(), m, wrapperspb.String(keys[i]), o...)
				if errs[i] == nil && r.IdempotencyKey != keys[i] {
					errs[i] = fmt.Errorf("receipt key %q, want %q", r.IdempotencyKey, keys[i])
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("enqueue %s: %v", keys[i], err)
		}
	}
	return keys
}

// asyncKill is what happened in one run of the async kill scenario.
type asyncKill struct {
	keys        []string
	states      map[string]string
	execs       map[string]int
	effects     map[string]int // Charge: charges per key; Apply: 1 where applied
	runs        runIndex
	interrupted map[string]bool // started on the victim, never finished there
	doneAtKill  int64
	dead        []deadLetter
	ledger      asyncLedger
}

const (
	asyncKillRequests    = 2000
	asyncKillConcurrency = 16
	asyncKillSleep       = 50 * time.Millisecond
	asyncKillLease       = time.Second
)

// runAsyncKill enqueues 2,000 requests of m, starts server w1 (Concurrency
// 16, 50ms handlers), SIGKILLs it mid-batch with handlers running, starts
// w2 and waits until every request has its final outcome.
func runAsyncKill(t *testing.T, m *tunnel.MethodDesc) *asyncKill {
	t.Helper()
	w := newWorld(t)
	c := w.newClient(tunnel.ClientOptions{})
	r := &asyncKill{}
	r.keys = enqueueJobs(t, c, m, m.Name, asyncKillRequests, nil)
	cfg := func(worker string) serverConfig {
		return serverConfig{worker: worker, lease: asyncKillLease, concurrency: asyncKillConcurrency}
	}
	victim := startAsyncServer(t, w.redis.URL(), cfg("w1"), asyncKillSleep)

	// Kill w1 a quarter of the way through, with at least half its slots
	// running handlers (started, effect not yet applied).
	var started, done int64
	waitUntil(t, 90*time.Second, "w1 to be a quarter through the batch with handlers running", func() bool {
		ctx, cancel := shortCtx()
		defer cancel()
		pipe := w.rdb.Pipeline()
		s := pipe.HLen(ctx, asyncExecsKey)
		d := pipe.Get(ctx, asyncDoneKey)
		_, _ = pipe.Exec(ctx)
		started, done = s.Val(), 0
		if v, err := d.Int64(); err == nil {
			done = v
		}
		return done >= asyncKillRequests/4 && started-done >= asyncKillConcurrency/2
	})
	victim.Kill()
	r.doneAtKill = done
	t.Logf("SIGKILLed w1 (pid %d) with %d requests finished and %d handlers started but not finished", victim.PID(), done, started-done)
	w.checkAsyncLedger("right after the kill", asyncKillRequests)

	startAsyncServer(t, w.redis.URL(), cfg("w2"), asyncKillSleep)
	recoveryStart := time.Now()
	sampled := false
	waitUntil(t, 2*time.Minute, "every request to reach its final outcome", func() bool {
		l := w.asyncLedger()
		if !sampled && l.processed > int64(asyncKillRequests)/2 {
			sampled = true
			w.checkAsyncLedger("while w2 works through the rest", asyncKillRequests)
		}
		return l.stream == 0 && l.retry == 0
	})
	t.Logf("w2 finished the batch %v after it started (lease %v)", time.Since(recoveryStart).Round(time.Millisecond), asyncKillLease)

	r.ledger = w.checkAsyncLedger("at the end", asyncKillRequests)
	r.states = w.jobStates(r.keys)
	r.execs = w.intHash(asyncExecsKey)
	r.runs = w.asyncRuns()
	r.interrupted = r.runs.interrupted("w1")
	r.dead = w.jobDeadLetters()
	if m.Idempotent {
		ctx, cancel := shortCtx()
		defer cancel()
		applied, err := w.rdb.HGetAll(ctx, asyncEffectKey).Result()
		if err != nil {
			t.Fatal(err)
		}
		r.effects = map[string]int{}
		for k := range applied {
			r.effects[k] = 1
		}
	} else {
		r.effects = w.intHash(asyncEffectKey)
	}

	// Rules for both methods.
	known := map[string]bool{}
	for _, k := range r.keys {
		known[k] = true
	}
	for k, n := range r.execs {
		if !known[k] {
			t.Errorf("key %s executed %d time(s) but was never enqueued", k, n)
		}
	}
	for _, k := range r.keys {
		if n := r.runs.startsOn(k, "w2"); n > 1 {
			t.Errorf("key %s ran %d times on the live worker w2", k, n)
		}
		if n := r.runs.startsOn(k, "w1"); n > 1 {
			t.Errorf("key %s ran %d times on w1", k, n)
		}
	}
	if len(r.interrupted) == 0 {
		t.Fatalf("no handler was running on w1 when it was killed; the scenario proved nothing")
	}
	return r
}

// TestKillServerMidAsyncBatch SIGKILLs a worker in the middle of 2,000
// async requests (Concurrency 16, 50ms handlers, each request with an
// idempotency key), then starts another. Nothing is lost: every request
// ends processed or dead-lettered, and accepted = processed +
// dead-lettered + queued holds at every sample.
//
//   - Idempotent method: every key ends SUCCESS, its effect applied once;
//     only requests in flight on the dead worker ran twice; no dead letters.
//   - Non-idempotent method: the requests in flight on the dead worker are
//     dead-lettered, "outcome unknown", never run again; every other
//     request ran, and took effect, exactly once.
func TestKillServerMidAsyncBatch(t *testing.T) {
	t.Run("Idempotent", func(t *testing.T) {
		r := runAsyncKill(t, applyMethod)
		executions, reran := 0, 0
		for _, k := range r.keys {
			n := r.execs[k]
			executions += n
			if r.states[k] != "SUCCESS" {
				t.Errorf("key %s: state %q, want SUCCESS", k, r.states[k])
			}
			if r.effects[k] != 1 {
				t.Errorf("key %s: effect applied %d times, want exactly 1", k, r.effects[k])
			}
			if n > 1 {
				reran++
			}
			switch {
			case n == 0:
				t.Errorf("key %s is SUCCESS but its handler never ran", k)
			case n > 2:
				t.Errorf("key %s ran %d times; one worker died, so at most twice", k, n)
			case n == 2:
				if got := r.runs.started[k]; got[0] != "w1" || got[1] != "w2" {
					t.Errorf("key %s ran twice, on %v: only a run that died with w1 may run again (on w2)", k, got)
				}
			}
		}
		for k := range r.interrupted {
			if r.execs[k] != 2 {
				t.Errorf("key %s was running on w1 when it died but ran %d time(s) in all, want 2 (re-run on w2)", k, r.execs[k])
			}
		}
		// A request runs again only if w1 held it when it died: its
		// handler was running, or had finished without its outcome written.
		if reran > asyncKillConcurrency {
			t.Errorf("%d keys ran twice, more than the %d w1 could hold at once", reran, asyncKillConcurrency)
		}
		if len(r.dead) != 0 {
			t.Errorf("%d dead letters for an idempotent method, e.g. %+v", len(r.dead), r.dead[0])
		}
		if r.ledger.processed != asyncKillRequests {
			t.Errorf("%d of %d processed", r.ledger.processed, asyncKillRequests)
		}
		t.Logf("Apply (idempotent), %d requests, w1 killed after finishing %d: executed %d times in all; keys re-run %d (%d handlers cut off by the kill); dead-lettered %d; effects applied for %d keys, once each",
			asyncKillRequests, r.doneAtKill, executions, reran, len(r.interrupted), len(r.dead), len(r.effects))
	})

	t.Run("NotIdempotent", func(t *testing.T) {
		r := runAsyncKill(t, chargeMethod)
		dead := map[string]deadLetter{}
		for _, d := range r.dead {
			if _, dup := dead[d.key]; dup {
				t.Errorf("key %s dead-lettered twice", d.key)
			}
			dead[d.key] = d
			if !strings.HasPrefix(d.reason, "outcome unknown") || !strings.Contains(d.reason, "w1") {
				t.Errorf("dead letter of %s: reason %q, want \"outcome unknown\" naming w1", d.key, d.reason)
			}
			if d.code != tunnel.Aborted.String() {
				t.Errorf("dead letter of %s: code %s, want ABORTED", d.key, d.code)
			}
		}
		executions, reran, deadRan, deadCharged := 0, 0, 0, 0
		for _, k := range r.keys {
			n := r.execs[k]
			executions += n
			if n > 1 {
				reran++
				t.Errorf("key %s of a non-idempotent method ran %d times (on %v)", k, n, r.runs.started[k])
			}
			if _, ok := dead[k]; ok {
				if r.states[k] != "DEAD" {
					t.Errorf("dead-lettered key %s: state %q, want DEAD", k, r.states[k])
				}
				if n > 0 {
					deadRan++
					if r.runs.startsOn(k, "w1") != 1 {
						t.Errorf("dead-lettered key %s ran on %v, not on w1", k, r.runs.started[k])
					}
				}
				if r.effects[k] > 0 {
					deadCharged++
				}
				continue
			}
			if r.states[k] != "SUCCESS" || n != 1 || r.effects[k] != 1 {
				t.Errorf("key %s: state %q, ran %d time(s), charged %d time(s); want SUCCESS, once, once", k, r.states[k], n, r.effects[k])
			}
		}
		for k := range r.interrupted {
			if _, ok := dead[k]; !ok {
				t.Errorf("key %s was running on w1 when it died but was not dead-lettered (state %q, ran %d time(s))", k, r.states[k], r.execs[k])
			}
		}
		if len(dead) > asyncKillConcurrency {
			t.Errorf("%d keys dead-lettered, more than the %d w1 could hold at once", len(dead), asyncKillConcurrency)
		}
		if int(r.ledger.processed)+len(dead) != asyncKillRequests {
			t.Errorf("processed %d + dead-lettered %d != %d accepted", r.ledger.processed, len(dead), asyncKillRequests)
		}
		keys := make([]string, 0, len(dead))
		for k := range dead {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		t.Logf("Charge (not idempotent), %d requests, w1 killed after finishing %d: executed %d times in all, keys re-run %d; processed %d; dead-lettered %d \"outcome unknown\" (%d cut off mid-handler, %d finished and charged but not yet recorded, %d claimed but never started): %v",
			asyncKillRequests, r.doneAtKill, executions, reran, r.ledger.processed, len(dead), len(r.interrupted), deadCharged, len(dead)-deadRan, keys)
		if len(dead) > 0 {
			t.Logf("e.g. dead letter %+v", r.dead[0])
		}
	})
}

// TestDelayedSurviveServerKill: delayed requests wait in Redis, not in a
// worker. A server is SIGKILLed while they wait; once they are all due a
// new server starts, and each runs exactly once, none before it was due.
func TestDelayedSurviveServerKill(t *testing.T) {
	w := newWorld(t)
	c := w.newClient(tunnel.ClientOptions{})
	victim := startAsyncServer(t, w.redis.URL(), serverConfig{worker: "w1"}, time.Millisecond)
	const n = 100
	enqueuedAt := time.Now()
	// Due 2s to 3s from now, the last few after the new server starts.
	keys := enqueueJobs(t, c, applyMethod, "delayed", n, func(i int) []tunnel.CallOption {
		return []tunnel.CallOption{tunnel.WithProcessAt(enqueuedAt.Add(2*time.Second + time.Duration(i)*10*time.Millisecond))}
	})
	victim.Kill()
	killedAt := time.Now()
	// Unless this machine is so loaded that the enqueues took 2s, none was
	// due before the kill: all wait in the retry set.
	if l := w.asyncLedger(); time.Now().Before(enqueuedAt.Add(2*time.Second)) && l.retry != n {
		t.Errorf("after the kill: %v; want all %d delayed requests in the retry set", l, n)
	}
	time.Sleep(time.Until(enqueuedAt.Add(2500 * time.Millisecond)))
	restartedAt := time.Now()
	startAsyncServer(t, w.redis.URL(), serverConfig{worker: "w2"}, time.Millisecond)
	waitUntil(t, time.Minute, "every delayed request to finish", func() bool {
		l := w.asyncLedger()
		return l.stream == 0 && l.retry == 0
	})
	l := w.checkAsyncLedger("after the restart", n)
	if l.processed != n {
		t.Errorf("%v; want all %d processed", l, n)
	}
	execs := w.intHash(asyncExecsKey)
	first := w.intHash(asyncFirstKey)
	runs := w.asyncRuns()
	late := 0
	for i, k := range keys {
		if execs[k] != 1 {
			t.Errorf("delayed %s ran %d times, want 1", k, execs[k])
		}
		due := enqueuedAt.Add(2*time.Second + time.Duration(i)*10*time.Millisecond)
		ran := time.UnixMilli(int64(first[k]))
		// Millisecond timestamps on one host: 1ms of rounding, plus the
		// measured clock offset to Redis (see TestAsyncDelayedRunsNoEarlier).
		if ran.Before(due.Add(-10 * time.Millisecond)) {
			t.Errorf("delayed %s ran at %v, before it was due at %v", k, ran.Format(time.StampMilli), due.Format(time.StampMilli))
		}
		if ws := runs.started[k]; len(ws) > 0 && ws[0] != "w2" && due.After(killedAt) {
			t.Errorf("delayed %s, due after w1 was killed, ran on %v", k, ws)
		}
		if due.After(restartedAt) {
			late++
		}
	}
	t.Logf("%d delayed requests survived a SIGKILLed server: %d were due while none ran, %d after the new one started; all ran once, none early", n, n-late, late)
}
