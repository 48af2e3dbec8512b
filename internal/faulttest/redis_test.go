package faulttest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// load is a steady stream of calls from a few goroutines, each calling
// back to back (with a short gap) until stopped or the shared budget of
// calls is spent. Bounded in count and time.
type load struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	outs []outcome
	left int
}

func startLoad(c *localClient, goroutines, budget int, m *tunnel.MethodDesc, in string, timeout, gap time.Duration) *load {
	l := &load{stop: make(chan struct{}), left: budget}
	for range goroutines {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				l.mu.Lock()
				if l.left == 0 {
					l.mu.Unlock()
					return
				}
				l.left--
				l.mu.Unlock()
				o := c.call(m, in, timeout)
				l.mu.Lock()
				l.outs = append(l.outs, o)
				l.mu.Unlock()
				select {
				case <-l.stop:
					return
				case <-time.After(gap):
				}
			}
		}()
	}
	return l
}

// finish stops the load and returns every outcome, failing the test if a
// call is still running after timeout (a call hanging past its deadline).
func (l *load) finish(t *testing.T, timeout time.Duration) []outcome {
	t.Helper()
	close(l.stop)
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("load calls still running %v after the load stopped: a call hangs", timeout)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.outs
}

// TestClientPauseRedis stalls Redis with CLIENT PAUSE 3000 ALL under a
// steady load of calls with 1s deadlines. Calls whose deadline passes
// during the stall fail with DEADLINE_EXCEEDED (and, if they claim to be
// not executed, never run), the others succeed, calls made after the stall
// succeed, and once client and server are closed no goroutine is left.
func TestClientPauseRedis(t *testing.T) {
	w := newWorld(t)
	admin := w.redis.Client(t)
	resumed := w.redis.Client(t)
	ctx := context.Background()
	// Both connections exist before the pause (go-redis dials lazily).
	if err := admin.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := resumed.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	leaks := goleak.IgnoreCurrent()

	const (
		timeout = time.Second
		pause   = 3 * time.Second
	)
	srv := w.startLocalServer(tunnel.ServerOptions{Concurrency: 16})
	// The breakers are off: this test is about what deadlines do during a
	// stall. With them on, the in-flight calls that time out open the
	// breaker, and the load's remaining calls fail fast (UNAVAILABLE, not
	// executed) until its cool-down ends, whether the 8 callers happen to
	// be in flight at once or not (breaker_test.go covers that).
	c := w.newClient(tunnel.ClientOptions{Breaker: tunnel.BreakerOptions{Disabled: true}})
	first := c.call(writeMethod, "0s", 10*time.Second)
	if first.err != nil {
		t.Fatalf("first call: %v", first)
	}

	l := startLoad(c, 8, 600, writeMethod, "50ms", timeout, 10*time.Millisecond)
	time.Sleep(time.Second)
	pausedAt := time.Now()
	if err := admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	// A command on another connection returns when Redis resumes.
	if err := resumed.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after the pause: %v", err)
	}
	resumedAt := time.Now()
	time.Sleep(3 * time.Second)
	outs := append(l.finish(t, timeout+pause+10*time.Second), first)

	w.waitDrained(20 * time.Second)
	tl := checkOutcomes(t, outs, w.execs(), tunnel.OK, tunnel.DeadlineExceeded)
	settle := resumedAt.Add(time.Second)
	var before, during, after int
	for _, o := range outs {
		switch {
		case o.end.Before(pausedAt):
			before++
			if o.err != nil {
				t.Errorf("call %v failed before the pause", o)
			}
		case o.start.After(settle):
			after++
			if o.err != nil {
				t.Errorf("call %v, made %v after Redis resumed, failed", o, o.start.Sub(resumedAt).Round(time.Millisecond))
			}
		default:
			during++
		}
		// A bound against hanging, not a timing claim: no call outlives
		// its deadline by more than the stall plus slack.
		if o.took() > o.timeout+pause+hangSlack {
			t.Errorf("call %v returned %v after its deadline", o, (o.took() - o.timeout).Round(time.Millisecond))
		}
	}
	if tl.byCode[tunnel.DeadlineExceeded] == 0 {
		t.Errorf("no call ran out its deadline during a %v stall of Redis: the pause did not hit the load", pause)
	}
	if after == 0 {
		t.Error("no call was made after Redis resumed")
	}
	t.Logf("CLIENT PAUSE %v: %d calls (%d before, %d around, %d after the stall): %v", pause, len(outs), before, during, after, tl)

	c.Close()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, leaks)
}

// TestRedisRestartMidLoad stops Redis for three seconds and starts it again
// (with its data, appendonly yes) under a steady load. Client and server recover by themselves: calls
// during the outage fail with UNAVAILABLE or DEADLINE_EXCEEDED within
// their deadline plus slack, never hang, never run when they say they did
// not, and calls after recovery succeed. Nothing stays pending.
func TestRedisRestartMidLoad(t *testing.T) {
	w := newWorld(t, redistest.WithConfig("appendonly", "yes"))
	const timeout = 2 * time.Second
	w.startLocalServer(tunnel.ServerOptions{Concurrency: 16, Lease: time.Second})
	c := w.newClient(tunnel.ClientOptions{})
	first := c.call(writeMethod, "0s", 10*time.Second)
	if first.err != nil {
		t.Fatalf("first call: %v", first)
	}

	// Budget for about 20s of load: enough to outlast the outage and the
	// client's circuit breaker cool-down (5s) after it; finish stops it
	// once recovery has been seen.
	l := startLoad(c, 8, 8000, writeMethod, "50ms", timeout, 20*time.Millisecond)
	time.Sleep(time.Second)
	downAt := time.Now()
	w.redis.Stop() // SIGTERM: Redis writes its AOF and exits
	// Down for longer than a call's deadline, so calls do fail (go-redis
	// retries ride out a shorter outage).
	time.Sleep(3 * time.Second)
	w.redis.Restart(t)
	upAt := time.Now()

	// Probe until calls succeed again: a success, and no failure in the
	// quarter second after it. One success is not yet recovery: calls of
	// the load that were failing while it ran may report after it and
	// open the client's circuit breaker (five consecutive failures), which
	// then refuses calls for its cool-down. The probes count as calls too.
	var probes []outcome
	var recoveredAt time.Time // when the current run of successful probes began
	for deadline := time.Now().Add(30 * time.Second); ; {
		o := c.call(writeMethod, "0s", timeout)
		probes = append(probes, o)
		if o.err != nil {
			recoveredAt = time.Time{}
		} else if recoveredAt.IsZero() {
			recoveredAt = o.end
		} else if o.start.After(recoveredAt.Add(250 * time.Millisecond)) {
			break
		}
		if time.Now().After(deadline) {
			l.finish(t, timeout+10*time.Second)
			t.Fatalf("calls did not succeed again within 30s of Redis coming back; last: %v", o)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	outs := append(append(l.finish(t, timeout+10*time.Second), probes...), first)

	w.waitDrained(30 * time.Second)
	tl := checkOutcomes(t, outs, w.execs(), tunnel.OK, tunnel.Unavailable, tunnel.DeadlineExceeded)
	settle := recoveredAt.Add(time.Second)
	var after int
	for _, o := range outs {
		// A bound against hanging, not a timing claim.
		if o.took() > o.timeout+hangSlack {
			t.Errorf("call %v took %v, more than its %v deadline plus %v: it hung", o, o.took().Round(time.Millisecond), o.timeout, hangSlack)
		}
		switch {
		case o.end.Before(downAt) && o.err != nil:
			t.Errorf("call %v failed before Redis went down", o)
		case o.start.After(settle):
			after++
			if o.err != nil {
				t.Errorf("call %v, made %v after the first successful call since the restart, failed", o, o.start.Sub(recoveredAt).Round(time.Millisecond))
			}
		}
	}
	if after == 0 {
		t.Error("no call was made after recovery")
	}
	t.Logf("Redis down for %v; first success %v after it was back (%d probes); %d calls, %d after recovery: %v",
		upAt.Sub(downAt).Round(time.Millisecond), recoveredAt.Sub(upAt).Round(time.Millisecond), len(probes), len(outs), after, tl)
}

// TestRedisOutageWhileHandlersFinish stops Redis while handlers run and
// keeps it down until they have finished and failed to write their
// results, then starts it again, well within the callers' deadlines. No
// worker died, so no caller may hear ABORTED "outcome unknown": each call
// ends with its handler's result (or, if recovery is slow, UNAVAILABLE or
// DEADLINE_EXCEEDED), and no non-idempotent request runs twice.
func TestRedisOutageWhileHandlersFinish(t *testing.T) {
	w := newWorld(t, redistest.WithConfig("appendonly", "yes"))
	srv := w.startLocalServer(tunnel.ServerOptions{Concurrency: 16, Lease: time.Second})
	c := w.newClient(tunnel.ClientOptions{})
	const n = 8
	calls := c.goCalls(n, writeMethod, 6*time.Second, func(int) string { return "200ms" })
	waitUntil(t, 20*time.Second, "the handlers to start", func() bool { return len(w.execs()) == n })
	w.redis.Stop()
	time.Sleep(3 * time.Second) // the handlers end, and their completions fail, meanwhile
	w.redis.Restart(t)

	outs := calls.wait(t, 30*time.Second)
	if err := w.drained(8 * time.Second); err != nil {
		t.Error(err)
	}
	tl := checkOutcomes(t, outs, w.execs(), tunnel.OK, tunnel.Unavailable, tunnel.DeadlineExceeded)
	self := srv.srv.WorkerID()
	var own []string
	for _, line := range srv.logs.Lines("took over a request") {
		if strings.Contains(line, "previous_worker="+self) {
			own = append(own, line)
		}
	}
	if len(own) > 0 {
		t.Errorf("worker %s took over %d of its own requests as if it had died, e.g.:\n%s", self, len(own), own[0])
	}
	t.Logf("%d calls in flight across a 3s Redis outage: %v", n, tl)
}
