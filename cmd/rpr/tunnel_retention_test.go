package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	"github.com/rprtunnel/rpr/internal/nettest"
)

// TestTunnelEgressRetention: an egress started with --retention keeps a
// record of each synchronous request it answers, so rpr trace finds the
// request by its X-Rpr-Request-Id after it finished, with how it ended;
// an async request is found by its id and by its Idempotency-Key without
// it. A negative --retention is refused.
func TestTunnelEgressRetention(t *testing.T) {
	t.Parallel()
	w := newTunWorld(t)
	down := "http://" + nettest.RefusedAddr(t) // connections are refused
	startEgressProc(t, "", w.redis.URL(), "keeper-e1", "--retention", "10m")
	w.waitLive("keeper-e1")
	w.setRoute("down", "--path", "/down", "--upstream", down)
	w.setRoute("jobs", "--path", "/jobs", "--upstream", down, "--mode", "async")
	w.startIngress()

	a := w.send("GET", "/down/order", nil)
	if a.status != http.StatusBadGateway || a.requestID() == "" {
		t.Fatalf("sync request to a down upstream: %v; want 502 with a request id", a)
	}
	out, code := runRPR(t, "trace", "--redis", w.redis.URL(), a.requestID())
	for _, want := range []string{
		"service   " + upstream.HTTPService + "\n",
		"state     FAILED\n",
		" by worker keeper-e1: ",
		"kept for 10m0s (ServerOptions.Retention)",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("trace of a finished tunnelled request lacks %q: exit %d:\n%s", want, code, out)
		}
	}
	t.Logf("rpr trace of a finished tunnelled request:\n%s", out)

	r := w.post("/jobs/order", "job-7", []byte("order 7"))
	for _, arg := range []string{r.RequestID, "job-7"} {
		tunWait(t, 30*time.Second, "a trace of "+arg+" to show the request's state", func() bool {
			out, code = runRPR(t, "trace", "--redis", w.redis.URL(), arg)
			return code == 0 && strings.Contains(out, "state     ") && strings.Contains(out, r.RequestID)
		})
	}

	if out, code := runRPR(t, "egress", "--redis", w.redis.URL(), "--retention", "-1m"); code != 2 || !strings.Contains(out, "--retention -1m0s: must not be negative") {
		t.Errorf("egress --retention -1m: exit %d:\n%s", code, out)
	}
}
