package faulttest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/tunnel"
)

// killScenario is the shape of the worker-kill tests: two server
// processes, a burst of concurrent calls from an in-process client, and a
// SIGKILL of the first server while handlers run on it.
type killScenario struct {
	method      *tunnel.MethodDesc
	calls       int           // concurrent calls, all started at once
	concurrency int           // handler slots per server
	lease       time.Duration // ServerOptions.Lease of both servers
	timeout     time.Duration // each call's deadline
	// inFlight is how many handlers must be running on the victim before
	// it is killed.
	inFlight int
	// in gives the i-th call's request value (how long its handler sleeps).
	in func(i int) string
}

// killResult is what happened, for the test to judge.
type killResult struct {
	client   *localClient
	outs     []outcome
	execs    map[string]int
	runs     runIndex
	victim   string          // worker id of the killed server
	survivor string          // worker id of the other one
	killed   map[string]bool // ids whose handler was running on the victim when it died
	killedAt time.Time
	// recovery is the time from the SIGKILL to the first return of a call
	// whose handler was running on the victim; -1 if none returned.
	recovery time.Duration
}

func runKillScenario(t *testing.T, sc killScenario) *killResult {
	t.Helper()
	w := newWorld(t)
	r := &killResult{victim: "w1", survivor: "w2", recovery: -1}
	servers := startServers(t, w.redis.URL(),
		serverConfig{worker: r.victim, lease: sc.lease, concurrency: sc.concurrency},
		serverConfig{worker: r.survivor, lease: sc.lease, concurrency: sc.concurrency},
	)
	r.client = w.newClient(tunnel.ClientOptions{})

	calls := r.client.goCalls(sc.calls, sc.method, sc.timeout, sc.in)

	// Kill the victim once enough handlers run on it (their start is
	// recorded, their end is not).
	waitUntil(t, 30*time.Second, fmt.Sprintf("%d handlers running on %s", sc.inFlight, r.victim), func() bool {
		if calls.finished() == sc.calls {
			t.Fatalf("all calls returned before %d handlers ran at once on %s", sc.inFlight, r.victim)
		}
		return len(w.runs().interrupted(r.victim)) >= sc.inFlight
	})
	r.killedAt = time.Now()
	servers[0].Kill()
	t.Logf("SIGKILLed server %s (pid %d)", r.victim, servers[0].PID())

	r.outs = calls.wait(t, sc.timeout+30*time.Second)
	if err := w.drained(10 * time.Second); err != nil {
		// Judge the outcomes all the same: they say what went missing.
		t.Errorf("after the kill: %v", err)
	}
	r.execs = w.execs()
	r.runs = w.runs()
	r.killed = r.runs.interrupted(r.victim)
	for _, o := range r.outs {
		if r.killed[o.rid] {
			if d := o.end.Sub(r.killedAt); r.recovery < 0 || d < r.recovery {
				r.recovery = d
			}
		}
	}
	if len(r.killed) == 0 {
		t.Fatalf("no handler was running on %s when it was killed; the scenario proved nothing", r.victim)
	}
	if r.recovery < 0 {
		t.Errorf("none of the %d calls whose handler died with %s returned", len(r.killed), r.victim)
	}
	return r
}

// sleepMix is the request values of the kill tests: most handlers run
// 500ms; every eighth runs 1.5s, longer than the 1s lease, so a live
// worker must extend its lease to keep its call.
func sleepMix(i int) string {
	if i%8 == 7 {
		return "1500ms"
	}
	return "500ms"
}

// duplicateAnswers returns the ids among ids that the client got a second
// response for (it logs a response for a call no longer waiting).
func duplicateAnswers(c *localClient, ids map[string]bool) []string {
	var dup []string
	for _, line := range c.logs.Lines("no longer waiting") {
		for rid := range ids {
			if strings.Contains(line, rid) {
				dup = append(dup, rid)
			}
		}
	}
	return dup
}

// TestKillServerNonIdempotent kills one of two workers while 200 calls of a
// non-idempotent method are in flight. No request may run twice: a call
// whose worker died mid-run is answered ABORTED "outcome unknown" (or runs
// out its deadline, without claiming it was not executed), and every other
// call succeeds having run exactly once.
func TestKillServerNonIdempotent(t *testing.T) {
	r := runKillScenario(t, killScenario{
		method: writeMethod, calls: 200, concurrency: 50, lease: time.Second,
		timeout: 15 * time.Second, inFlight: 10, in: sleepMix,
	})
	tl := checkOutcomes(t, r.outs, r.execs, tunnel.OK, tunnel.Aborted, tunnel.DeadlineExceeded)

	answered := map[string]bool{}
	abortedWithoutRun := 0
	for _, o := range r.outs {
		switch o.code() {
		case tunnel.OK:
			answered[o.rid] = true
			if r.killed[o.rid] {
				t.Errorf("call %v succeeded although its only run died with %s", o, r.victim)
			}
		case tunnel.Aborted:
			answered[o.rid] = true
			if tunnel.NotExecuted(o.err) {
				t.Errorf("call %v: ABORTED (outcome unknown) but NotExecuted(err) is true", o)
			}
			want := fmt.Sprintf("outcome unknown: worker %s died while executing %s", r.victim, o.rid)
			if !strings.Contains(o.err.Error(), want) {
				t.Errorf("call %v: ABORTED message does not say %q", o, want)
			}
			if r.execs[o.rid] == 0 {
				// Possible but rare: the worker died between claiming the
				// request and the handler's first line.
				abortedWithoutRun++
			}
		}
	}
	for rid := range r.killed {
		if !answered[rid] {
			t.Logf("request %s died with %s and its caller got no answer before its deadline", rid, r.victim)
		}
	}
	if dup := duplicateAnswers(r.client, answered); len(dup) > 0 {
		t.Errorf("%d calls were answered more than once: %v", len(dup), dup)
	}
	t.Logf("200 Write calls, %s killed with %d handlers running: succeeded %d, aborted %d (%d of them before the handler ran), deadline exceeded %d; %v",
		r.victim, len(r.killed), tl.byCode[tunnel.OK], tl.byCode[tunnel.Aborted], abortedWithoutRun, tl.byCode[tunnel.DeadlineExceeded], tl)
	t.Logf("recovery: %v from SIGKILL to the first answer for a call that died with %s (lease %v)", r.recovery.Round(time.Millisecond), r.victim, time.Second)
}

// TestKillServerIdempotent is the same kill with an idempotent method: every
// call succeeds; those whose handler died with the killed worker run again
// on the survivor (and only those), each call is answered once.
func TestKillServerIdempotent(t *testing.T) {
	r := runKillScenario(t, killScenario{
		method: readMethod, calls: 200, concurrency: 50, lease: time.Second,
		timeout: 15 * time.Second, inFlight: 10, in: sleepMix,
	})
	tl := checkOutcomes(t, r.outs, r.execs, tunnel.OK)

	ids := map[string]bool{}
	reran := 0
	for _, o := range r.outs {
		ids[o.rid] = true
		n := r.execs[o.rid]
		switch {
		case n > 2:
			t.Errorf("call %v ran %d times; one worker died, so at most twice", o, n)
		case n == 2:
			reran++
			if r.runs.startsOn(o.rid, r.victim) == 0 {
				t.Errorf("call %v ran twice but its first run did not die with %s (runs on %v): a live worker's call was taken over", o, r.victim, r.runs.started[o.rid])
			}
		}
		if r.runs.startsOn(o.rid, r.survivor) > 1 {
			t.Errorf("call %v ran %d times on the live worker %s", o, r.runs.startsOn(o.rid, r.survivor), r.survivor)
		}
	}
	for rid := range r.killed {
		if r.execs[rid] < 2 {
			t.Errorf("request %s died with %s but was not run again (%d run)", rid, r.victim, r.execs[rid])
		}
	}
	if dup := duplicateAnswers(r.client, ids); len(dup) > 0 {
		t.Errorf("%d calls were answered more than once: %v", len(dup), dup)
	}
	t.Logf("200 Read calls, %s killed with %d handlers running: succeeded %d, executed twice (re-executed) %d; %v",
		r.victim, len(r.killed), tl.byCode[tunnel.OK], reran, tl)
	t.Logf("recovery: %v from SIGKILL to the first re-executed call's answer (lease %v)", r.recovery.Round(time.Millisecond), time.Second)
}

// envRecoveryRuns sets how many kills TestRecoveryTimeAfterKill makes (each
// with a fresh Redis and servers); it logs every time and the median.
const envRecoveryRuns = "RPR_FAULT_RECOVERY_RUNS"

// envRecoveryLease sets the servers' lease in TestRecoveryTimeAfterKill
// (default 1s, to keep CI fast; 5s is the runtime's default).
const envRecoveryLease = "RPR_FAULT_RECOVERY_LEASE"

// TestRecoveryTimeAfterKill measures, without asserting it, the time from
// SIGKILLing a worker to the first answer for a call that was running on
// it (idempotent, so re-executed by the survivor). Run it several times
// with -count N or RPR_FAULT_RECOVERY_RUNS=N and take the median.
func TestRecoveryTimeAfterKill(t *testing.T) {
	runs := 1
	if v := os.Getenv(envRecoveryRuns); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 50 {
			t.Fatalf("%s=%q: want a count from 1 to 50", envRecoveryRuns, v)
		}
		runs = n
	}
	lease := time.Second
	if v := os.Getenv(envRecoveryLease); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > time.Minute {
			t.Fatalf("%s=%q: want a duration up to 1m, e.g. 5s", envRecoveryLease, v)
		}
		lease = d
	}
	var times []time.Duration
	for i := range runs {
		t.Run(fmt.Sprintf("kill%d", i+1), func(t *testing.T) {
			r := runKillScenario(t, killScenario{
				method: readMethod, calls: 40, concurrency: 10, lease: lease,
				timeout: 15*time.Second + 2*lease, inFlight: 5,
				in: func(int) string { return "500ms" },
			})
			checkOutcomes(t, r.outs, r.execs, tunnel.OK)
			t.Logf("recovery after SIGKILL: %v (lease %v, %d handlers died)", r.recovery.Round(time.Millisecond), lease, len(r.killed))
			if r.recovery >= 0 {
				times = append(times, r.recovery)
			}
		})
	}
	if len(times) > 1 {
		t.Logf("recovery after SIGKILL over %d runs: median %v, all %v", len(times), median(times).Round(time.Millisecond), times)
	}
}

// TestKillServerIdleSurvivor kills a worker while its calls run, with a
// second worker (default Concurrency and BatchSize) that has nothing else
// to do: the idle survivor must take the dead worker's calls over within a
// few leases, not leave them to run out their deadlines.
func TestKillServerIdleSurvivor(t *testing.T) {
	const lease = time.Second
	w := newWorld(t)
	victim := startServers(t, w.redis.URL(), serverConfig{worker: "w1", lease: lease, concurrency: 10})[0]
	c := w.newClient(tunnel.ClientOptions{})
	const n = 5
	calls := c.goCalls(n, readMethod, 8*time.Second, func(int) string { return "2s" })
	waitUntil(t, 20*time.Second, "the calls to run on w1", func() bool {
		return len(w.runs().interrupted("w1")) == n
	})
	startServers(t, w.redis.URL(), serverConfig{worker: "w2", lease: lease})
	killedAt := time.Now()
	victim.Kill()

	outs := calls.wait(t, 40*time.Second)
	if err := w.drained(6 * time.Second); err != nil {
		t.Errorf("after the kill: %v", err)
	}
	execs := w.execs()
	checkOutcomes(t, outs, execs, tunnel.OK)
	runs := w.runs()
	recovery := time.Duration(-1)
	for _, o := range outs {
		if got := runs.started[o.rid]; len(got) != 2 || got[0] != "w1" || got[1] != "w2" {
			t.Errorf("call %v: runs on %v, want w1 (killed) then w2", o, got)
		}
		if d := o.end.Sub(killedAt); o.err == nil && (recovery < 0 || d < recovery) {
			recovery = d
		}
	}
	if recovery >= 0 {
		t.Logf("idle survivor: first re-executed call answered %v after SIGKILL (lease %v)", recovery.Round(time.Millisecond), lease)
	}
}
