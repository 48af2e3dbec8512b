package faulttest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
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
