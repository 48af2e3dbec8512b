package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/ingress"
	"github.com/rprtunnel/rpr/internal/redistest"
)

// TestTunnelRedisRestart crashes Redis (SIGKILL; AOF with appendfsync
// always) while the egress holds four sync requests at the upstream and
// ten async requests wait for a retry, keeps it down until the sync
// callers are answered, and starts it again:
//
//   - each in-flight sync request is answered 502, 503 or 504 with an
//     outcome, within its deadline (3 s) and a margin, and the upstream
//     got it exactly once (it is not run again after the restart);
//   - requests sent while Redis is down, sync or async, are answered 502,
//     503 or 504 within their deadline, and one answered "not executed"
//     never reaches the upstream;
//   - once a request succeeds again, the next 20 all do;
//   - four requests in flight across a quick restart (Redis back before
//     the upstream answers) are answered within their deadline, 200 or a
//     clean failure, and the upstream got each once;
//   - each async request accepted before the crash is delivered (answered
//     2xx by the upstream) exactly once, and not tried again after that;
//   - nothing is dead-lettered, nothing is left in the queue.
func TestTunnelRedisRestart(t *testing.T) {
	t.Parallel()
	w := newTunWorld(t, redisAOF()...)
	release, quick := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	open := false // the async gate: 503 until the test opens it
	rec, up := startUpstream(t, "upstream", func(rw http.ResponseWriter, req *http.Request, hit *tunHit, _ []byte) int {
		switch {
		case strings.HasPrefix(req.URL.Path, "/slow/"):
			return upHold(rw, req, hit, release, http.StatusOK)
		case strings.HasPrefix(req.URL.Path, "/quick/"):
			return upHold(rw, req, hit, quick, http.StatusOK)
		case strings.HasPrefix(req.URL.Path, "/jobs/"):
			mu.Lock()
			ok := open
			mu.Unlock()
			if !ok {
				return upReply(rw, hit, http.StatusServiceUnavailable)
			}
		}
		return upReply(rw, hit, http.StatusOK)
	})
	w.startEgress("e1")
	w.setRoute("slow", "--path", "/slow", "--upstream", up.URL)
	w.setRoute("fast", "--path", "/fast", "--upstream", up.URL)
	w.setRoute("quick", "--path", "/quick", "--upstream", up.URL)
	w.setRoute("jobs", "--path", "/jobs", "--upstream", up.URL, "--mode", "async")
	w.startIngress()
	if a := w.send("GET", "/fast/before", nil); a.status != http.StatusOK {
		t.Fatalf("before the restart: %v", a)
	}

	const jobs, inFlight = 10, 4
	receipts := map[string]tunReceipt{}
	for i := range jobs {
		key := fmt.Sprintf("job-%d", i)
		receipts[key] = w.post("/jobs/"+key, key, []byte(key))
	}
	tunWait(t, 20*time.Second, "every async request to be refused once (503)", func() bool {
		for key := range receipts {
			if len(rec.byKey(key)) == 0 {
				return false
			}
		}
		return true
	})
	answers := make(chan tunAnswer, inFlight)
	for i := range inFlight {
		go func() {
			answers <- w.send("GET", fmt.Sprintf("/slow/%d", i), nil, ingress.TimeoutHeader, "3s", tagHeader, fmt.Sprintf("slow-%d", i))
		}()
	}
	tunWait(t, 20*time.Second, "the upstream to hold the sync requests", func() bool {
		return len(rec.where(func(h tunHit) bool { return strings.HasPrefix(h.Tag, "slow-") })) == inFlight
	})

	w.redis.Kill()
	close(release) // the egress gets its answers while Redis is down
	var slow []tunAnswer
	for range inFlight {
		select {
		case a := <-answers:
			slow = append(slow, a)
		case <-time.After(30 * time.Second):
			t.Fatalf("in-flight sync requests unanswered 30s after Redis died; got %v", slow)
		}
	}
	// While Redis is down: neither a sync nor an async request is accepted.
	duringSync := w.send("GET", "/fast/during", nil, ingress.TimeoutHeader, "3s", tagHeader, "during-sync")
	duringAsync := w.send("POST", "/jobs/during", []byte("during"), ingress.TimeoutHeader, "3s", "Idempotency-Key", "during-down")
	down := time.Now()
	w.redis.Restart(t)
	mu.Lock()
	open = true
	mu.Unlock()

	// Recovery is requests succeeding for a second and a half without a
	// failure, not one success: once its dials have failed as often as it
	// has connections, go-redis refuses new dials until a probe it makes
	// once a second gets through, so a request that needs a new connection
	// can fail (not sent: safe to retry) after one that found a
	// connection succeeded.
	var recoveredAt time.Time // when the current run of successes began
	tunWait(t, 30*time.Second, "requests to succeed again after the restart", func() bool {
		a := w.send("GET", "/fast/recovering", nil)
		switch {
		case a.status != http.StatusOK:
			recoveredAt = time.Time{}
		case recoveredAt.IsZero():
			recoveredAt = time.Now()
		}
		return !recoveredAt.IsZero() && time.Since(recoveredAt) >= 1500*time.Millisecond
	})
	t.Logf("Redis restarted (pid %d); requests succeeded again from %v after the restart began", w.redis.PID(), recoveredAt.Sub(down).Round(time.Millisecond))
	for i := range 20 {
		if a := w.send("GET", fmt.Sprintf("/fast/after-%d", i), nil, tagHeader, fmt.Sprintf("after-%d", i)); a.status != http.StatusOK {
			t.Errorf("request %d after recovery: %v", i, a)
		}
	}

	// A quick restart: Redis is back before the egress has the upstream's
	// answers to four more requests.
	quickAnswers := make(chan tunAnswer, inFlight)
	for i := range inFlight {
		go func() {
			quickAnswers <- w.send("GET", fmt.Sprintf("/quick/%d", i), nil, ingress.TimeoutHeader, "10s", tagHeader, fmt.Sprintf("quick-%d", i))
		}()
	}
	tunWait(t, 20*time.Second, "the upstream to hold the quick requests", func() bool {
		return len(rec.where(func(h tunHit) bool { return strings.HasPrefix(h.Tag, "quick-") })) == inFlight
	})
	w.redis.Kill()
	w.redis.Restart(t)
	close(quick)
	var quicks []tunAnswer
	for range inFlight {
		select {
		case a := <-quickAnswers:
			quicks = append(quicks, a)
		case <-time.After(30 * time.Second):
			t.Fatalf("requests in flight across a quick restart unanswered after 30s; got %v", quicks)
		}
	}

	tunWait(t, 45*time.Second, "every async request to be delivered", func() bool {
		for key := range receipts {
			if !slices.ContainsFunc(rec.byKey(key), func(h tunHit) bool { return h.Status == http.StatusOK }) {
				return false
			}
		}
		return true
	})
	w.waitSettled(20 * time.Second)

	for _, a := range slow {
		ok := a.status == http.StatusBadGateway || a.status == http.StatusServiceUnavailable || a.status == http.StatusGatewayTimeout
		// The upstream got each of these (checked below): it ran.
		if a.err != nil || !ok || a.outcome() != ingress.OutcomeMayHaveExecuted {
			t.Errorf("in-flight sync request: %v; want 502, 503 or 504, %q (the upstream had it)", a, ingress.OutcomeMayHaveExecuted)
		}
	}
	for _, a := range []tunAnswer{duringSync, duringAsync} {
		ok := a.status == http.StatusBadGateway || a.status == http.StatusServiceUnavailable || a.status == http.StatusGatewayTimeout
		if a.err != nil || !ok || a.outcome() == "" {
			t.Errorf("request sent while Redis was down: %v; want 502, 503 or 504 with an outcome", a)
		}
	}
	if n := len(rec.byTag("during-sync")); n > 1 || (n == 1 && duringSync.outcome() == ingress.OutcomeNotExecuted) {
		t.Errorf("the sync request sent while Redis was down, answered %v, reached the upstream %d times", duringSync, n)
	}
	if n := len(rec.byKey("during-down")); n > 1 || (n == 1 && duringAsync.outcome() == ingress.OutcomeNotExecuted) {
		t.Errorf("the async request sent while Redis was down, answered %v, reached the upstream %d times", duringAsync, n)
	}
	for _, a := range quicks {
		// The upstream got each of these (checked below): a failure must
		// not say it did not run.
		ok := a.status == http.StatusOK || ((a.status == http.StatusBadGateway || a.status == http.StatusServiceUnavailable || a.status == http.StatusGatewayTimeout) && a.outcome() == ingress.OutcomeMayHaveExecuted)
		if a.err != nil || !ok {
			t.Errorf("request in flight across a quick restart: %v; want 200, or 502, 503 or 504 %q", a, ingress.OutcomeMayHaveExecuted)
		}
	}
	for i := range inFlight {
		for _, tag := range []string{fmt.Sprintf("slow-%d", i), fmt.Sprintf("quick-%d", i)} {
			if hits := rec.byTag(tag); len(hits) != 1 {
				t.Errorf("%s: the upstream got it %d times, want once: %+v", tag, len(hits), hits)
			}
		}
	}
	for key, r := range receipts {
		hits := rec.byKey(key)
		okAt := slices.IndexFunc(hits, func(h tunHit) bool { return h.Status == http.StatusOK })
		if okAt != len(hits)-1 || slices.ContainsFunc(hits, func(h tunHit) bool { return h.RequestID != r.RequestID }) {
			t.Errorf("%s: the upstream got %+v; want request %s answered 200 once, as its last attempt", key, hits, r.RequestID)
		}
	}
	if dl := w.deadLetters(); len(dl) != 0 {
		t.Errorf("dead letters: %+v; want none", dl)
	}
	for _, a := range slow {
		t.Logf("in-flight sync request answered %v", a)
	}
	t.Logf("while Redis was down: sync %v; async %v", duringSync, duringAsync)
	for _, a := range quicks {
		t.Logf("in flight across a quick restart: %v", a)
	}
	t.Logf("async attempts per key: %v", attemptsPerKey(rec, receipts))
}

// redisAOF makes a Redis that loses no acknowledged write in a crash.
func redisAOF() []redistest.Option {
	return []redistest.Option{redistest.WithConfig("appendonly", "yes"), redistest.WithConfig("appendfsync", "always")}
}

func attemptsPerKey(rec *tunRecorder, receipts map[string]tunReceipt) map[string]int {
	out := map[string]int{}
	for key := range receipts {
		out[key] = len(rec.byKey(key))
	}
	return out
}
