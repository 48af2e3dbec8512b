package main

// Fault tests of rpr ingress and rpr egress: separate processes, a real
// redis-server, loopback only. Each test counts what the upstream
// executed per request id, idempotency key or tag, and compares it with
// what the callers were told. They run in parallel with each other (and
// with TestTunnelTwoNetworks); the longest, TestTunnelUpstreamDown (an
// async request dead-lettered after six attempts, 1+2+4+8+16 s of backoff
// apart), takes about 35 s.

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/ingress"
	tunnelv1 "github.com/rprtunnel/rpr/gen/rpr/tunnel/v1"
	"github.com/rprtunnel/rpr/internal/nettest"
)

// deliverAttempts is how often rpr.tunnel.v1.HTTP/Deliver is tried: its
// retry.max_attempts option.
var deliverAttempts = func() int {
	for _, m := range tunnelv1.HTTP_ServiceDesc.Methods {
		if m.Name == "Deliver" {
			return m.Retry.MaxAttempts
		}
	}
	panic("rpr.tunnel.v1.HTTP has no Deliver")
}()

// TestTunnelEgressKilled SIGKILLs the only egress while it holds two sync
// requests, a streamed one and an async one at the upstream, then starts
// another egress.
//
//   - the sync request whose deadline (2 s) passes before the takeover is
//     answered 504 "may have executed"; the one with a longer deadline is
//     taken over and answered 502 "may have executed" (Forward is not
//     idempotent, so it is not run again); the upstream got each once;
//   - the async request runs again on the new egress (Deliver is
//     idempotent) with the same request id and Idempotency-Key, so the
//     upstream sees that key twice and answers it once;
//   - an async request posted while no egress runs is delivered once by
//     the new one;
//   - a streamed response that had sent its first part is cut once the
//     egress is seen dead, before its deadline: the caller gets a read
//     error after that part, not a clean end;
//   - nothing is dead-lettered, nothing is left in the queue.
func TestTunnelEgressKilled(t *testing.T) {
	t.Parallel()
	w := newTunWorld(t)
	rec, up := startUpstream(t, "upstream", func(rw http.ResponseWriter, req *http.Request, hit *tunHit, _ []byte) int {
		if strings.HasPrefix(req.URL.Path, "/stream/") {
			rw.WriteHeader(http.StatusOK)
			fmt.Fprintln(rw, "part 1")
			_ = http.NewResponseController(rw).Flush()
			<-req.Context().Done() // part 2 never comes: the egress dies
			return http.StatusOK
		}
		if strings.HasPrefix(req.URL.Path, "/sync/") || (hit.Key == "job-held" && hit.KeyN == 1) {
			return upHold(rw, req, hit, nil, http.StatusOK) // until the egress dies
		}
		return upReply(rw, hit, http.StatusOK)
	})
	e1 := w.startEgress("e1")
	w.setRoute("sync", "--path", "/sync", "--upstream", up.URL)
	w.setRoute("jobs", "--path", "/jobs", "--upstream", up.URL, "--mode", "async")
	w.setRoute("stream", "--path", "/stream", "--upstream", up.URL, "--mode", "stream")
	w.startIngress()

	streamed := make(chan tunStreamed, 1)
	firstPart := make(chan struct{})
	go func() {
		streamed <- w.stream("/stream/x", firstPart, ingress.TimeoutHeader, "20s", tagHeader, "stream")
	}()
	answers := make([]chan tunAnswer, 2)
	for i, timeout := range []string{"2s", "30s"} {
		answers[i] = make(chan tunAnswer, 1)
		go func() {
			answers[i] <- w.send("GET", fmt.Sprintf("/sync/s%d", i+1), nil, ingress.TimeoutHeader, timeout, tagHeader, fmt.Sprintf("s%d", i+1))
		}()
	}
	held := w.post("/jobs/a", "job-held", []byte("held by the egress that dies"))
	tunWait(t, 20*time.Second, "the upstream to hold s1, s2 and job-held", func() bool {
		return len(rec.byTag("s1")) == 1 && len(rec.byTag("s2")) == 1 && len(rec.byKey("job-held")) == 1 && len(rec.byTag("stream")) == 1
	})

	// The kill must come after the caller has the stream's first part
	// (the upstream holding the request says only that it wrote it).
	select {
	case <-firstPart:
	case <-time.After(20 * time.Second):
		t.Fatal("the streamed response's first part did not arrive within 20s")
	}
	killed := time.Now()
	e1.Kill()
	after := w.post("/jobs/b", "job-after", []byte("posted while no egress runs"))
	w.startEgress("e2")

	var cut tunStreamed
	select {
	case cut = <-streamed:
	case <-time.After(45 * time.Second):
		t.Fatal("the streamed response did not end 45s after the kill")
	}
	var got [2]tunAnswer
	for i := range answers {
		select {
		case got[i] = <-answers[i]:
		case <-time.After(45 * time.Second):
			t.Fatalf("s%d: no answer 45s after the kill", i+1)
		}
	}
	tunWait(t, 30*time.Second, "job-held to run again and job-after to run", func() bool {
		h, a := rec.byKey("job-held"), rec.byKey("job-after")
		return len(h) == 2 && h[1].Status == http.StatusOK && len(a) == 1 && a[0].Status == http.StatusOK
	})
	takeover := rec.byKey("job-held")[1].At.Sub(killed)
	w.waitSettled(20 * time.Second)

	for i, a := range got {
		tag := fmt.Sprintf("s%d", i+1)
		hits := rec.byTag(tag)
		if len(hits) != 1 || hits[0].RequestID != a.requestID() {
			t.Errorf("%s: the upstream got %+v; want it once, with the request id %q of the answer", tag, hits, a.requestID())
		}
		want := []int{http.StatusGatewayTimeout, http.StatusBadGateway}[i]
		if a.status != want || a.outcome() != ingress.OutcomeMayHaveExecuted {
			t.Errorf("%s: answered %v; want %d %q", tag, a, want, ingress.OutcomeMayHaveExecuted)
		}
	}
	if hits := rec.byKey("job-held"); len(hits) != 2 || hits[0].RequestID != held.RequestID || hits[1].RequestID != held.RequestID ||
		hits[0].Status != 0 || hits[1].Status != http.StatusOK {
		t.Errorf("job-held: the upstream got %+v; want request %s twice (the dead egress's, unanswered, then the new one's, answered 200)", hits, held.RequestID)
	}
	if hits := rec.byKey("job-after"); len(hits) != 1 || hits[0].RequestID != after.RequestID {
		t.Errorf("job-after: the upstream got %+v; want request %s once", hits, after.RequestID)
	}
	// The stream broke after its first part: the caller must see it cut
	// short, not ended.
	if cut.status != http.StatusOK || cut.first != "part 1\n" || cut.restErr == nil || cut.rest != "" {
		t.Errorf("streamed response broken by the kill: %v; want 200, part 1, then a read error", cut)
	}
	// Cut because the egress was seen dead, not by its 20s deadline.
	if broke := logLines(w.ingress, "streamed response broke"); len(broke) != 1 || !strings.Contains(broke[0], "stream broke") || strings.Contains(broke[0], "deadline") {
		t.Errorf("the ingress logged %q; want one \"streamed response broke\" for the dead egress's stream, not a deadline", broke)
	}
	if n := len(rec.byTag("stream")); n != 1 {
		t.Errorf("the upstream got the streamed request %d times, want once", n)
	}
	if n := len(rec.Hits()); n != 6 {
		t.Errorf("the upstream got %d requests, want 6: %+v", n, rec.Hits())
	}
	if dl := w.deadLetters(); len(dl) != 0 {
		t.Errorf("dead letters: %+v; want none", dl)
	}
	t.Logf("egress SIGKILLed; s1 answered %v, s2 %v; the stream %v; the new egress ran job-held again %v after the kill",
		got[0], got[1], cut, takeover.Round(time.Millisecond))
}

// TestTunnelUpstreamDown sends requests to an upstream nobody listens on:
// the sync one is answered 502 "not executed"; the async one is accepted,
// tried deliverAttempts times (each one a failed connection in the
// egress's log) and dead-lettered with a reason that names the refused
// connection and the exhausted attempts.
func TestTunnelUpstreamDown(t *testing.T) {
	t.Parallel()
	w := newTunWorld(t)
	down := "http://" + nettest.RefusedAddr(t) // connections are refused
	e1 := w.startEgress("e1")
	w.setRoute("down", "--path", "/down", "--upstream", down)
	w.setRoute("down-jobs", "--path", "/down-jobs", "--upstream", down, "--mode", "async")
	w.startIngress()

	direct := w.send("POST", "/down/order", []byte("order 1"))
	if direct.status != http.StatusBadGateway || direct.outcome() != ingress.OutcomeNotExecuted || !strings.Contains(direct.body, "connection refused") {
		t.Errorf("sync request to a down upstream: %v; want 502 %q naming the refused connection", direct, ingress.OutcomeNotExecuted)
	}
	receipt := w.post("/down-jobs/order", "down-1", []byte("order 2"))
	t0 := time.Now()
	tunWait(t, 75*time.Second, "the async request to be dead-lettered", func() bool {
		st, err := w.stats()
		return err == nil && st.DeadLetters == 1
	})
	t.Logf("dead-lettered %v after it was accepted", time.Since(t0).Round(time.Millisecond))
	w.waitSettled(10 * time.Second)

	letters := w.deadLetters()
	if len(letters) != 1 {
		t.Fatalf("dead letters: %+v; want the async request's alone", letters)
	}
	dl := letters[0]
	wantReason := fmt.Sprintf("attempts exhausted (%d of %d)", deliverAttempts, deliverAttempts)
	if dl.RequestID != receipt.RequestID || dl.Key != "down-1" || dl.Attempts != deliverAttempts ||
		!strings.Contains(dl.Error, "connection refused") || !strings.Contains(dl.Error, "it was not sent") || !strings.Contains(dl.Reason, wantReason) {
		t.Errorf("dead letter %+v; want request %s, key down-1, %d attempts, the refused connection in the error and %q in the reason",
			dl, receipt.RequestID, deliverAttempts, wantReason)
	}
	if n := len(logLines(e1, "upstream request failed", "request_id="+receipt.RequestID)); n != deliverAttempts {
		t.Errorf("the egress logged %d failed attempts of %s, want %d", n, receipt.RequestID, deliverAttempts)
	}
	if n := len(logLines(e1, "upstream request failed", "request_id="+direct.requestID())); n != 1 {
		t.Errorf("the egress logged %d failed attempts of the sync request %s, want 1", n, direct.requestID())
	}
}

// TestTunnelRouteChange moves route R from upstream U1 to U2 under a
// bounded load (8 senders, each request stamped with a sequence number,
// 150 more once the change is made, 2000 at most) with two egresses
// running. rpr upstreams set returns
// once both forward by the new table; the sequence number handed out
// last at that moment is the line: no request numbered after it reaches
// U1, every request is answered 200, and each reaches exactly one
// upstream exactly once.
func TestTunnelRouteChange(t *testing.T) {
	t.Parallel()
	w := newTunWorld(t)
	ok := func(rw http.ResponseWriter, _ *http.Request, hit *tunHit, _ []byte) int {
		return upReply(rw, hit, http.StatusOK)
	}
	u1, s1 := startUpstream(t, "u1", ok)
	u2, s2 := startUpstream(t, "u2", ok)
	w.startEgress("e1")
	w.startEgress("e2")
	w.setRoute("r", "--path", "/r", "--upstream", s1.URL)
	w.startIngress()

	const senders, maxRequests, afterChange = 8, 2000, 150
	var (
		seq     atomic.Int64
		line    atomic.Int64 // the last number handed out when set returned; 0 before
		mu      sync.Mutex
		answers = map[int64]tunAnswer{}
		wg      sync.WaitGroup
	)
	for range senders {
		wg.Go(func() {
			for {
				n := seq.Add(1)
				if l := line.Load(); n > maxRequests || (l > 0 && n > l+afterChange) {
					return
				}
				a := w.send("GET", fmt.Sprintf("/r/%d", n), nil, seqHeader, strconv.FormatInt(n, 10))
				mu.Lock()
				answers[n] = a
				mu.Unlock()
			}
		})
	}
	tunWait(t, 30*time.Second, "80 answers before the change", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(answers) >= 80
	})
	run := w.setRoute("r", "--path", "/r", "--upstream", s2.URL)
	n := seq.Load()
	line.Store(n)
	wg.Wait()
	if after := int64(len(answers)) - n; after < afterChange {
		t.Fatalf("only %d requests were sent after rpr upstreams set returned (at %d, after %v): the load ended too soon", after, n, run.elapsed)
	}
	if !strings.Contains(run.out, "applied by 2 egresses") {
		t.Errorf("rpr upstreams set did not say both egresses applied the change:\n%s", run.out)
	}

	where := map[int64][]string{} // seq -> the upstreams it reached
	for _, rec := range []*tunRecorder{u1, u2} {
		for _, h := range rec.Hits() {
			s, err := strconv.ParseInt(h.Seq, 10, 64)
			if err != nil {
				t.Fatalf("%s got a request without a sequence number: %+v", rec.name, h)
			}
			where[s] = append(where[s], rec.name)
			if rec == u1 && s > n {
				t.Errorf("request %d, sent after rpr upstreams set returned at %d, reached the old upstream u1", s, n)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for s, a := range answers {
		if a.status != http.StatusOK || len(where[s]) != 1 {
			t.Errorf("request %d: answered %v, reached %v; want 200 from exactly one upstream", s, a, where[s])
		}
	}
	if len(where) != len(answers) {
		t.Errorf("the upstreams got %d distinct requests, the senders sent %d", len(where), len(answers))
	}
	t.Logf("%d requests; rpr upstreams set returned after %v, when %d had been sent; u1 got %d, u2 got %d (%d sent after the change)",
		len(answers), run.elapsed.Round(time.Millisecond), n, len(u1.Hits()), len(u2.Hits()), int64(len(answers))-n)
}
