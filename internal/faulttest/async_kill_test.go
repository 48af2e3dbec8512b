package faulttest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

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
