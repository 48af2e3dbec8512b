package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/ingress"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
)

// TestTunnelLoop routes a path to the ingress itself, the loop a route
// set by mistake makes: each request is forwarded again until it has
// crossed upstream.MaxHops tunnels, and then refused 508 "not executed",
// saying it is a loop, by the ingress it reached with MaxHops crossings;
// nothing is left waiting. A request that says it crossed MaxHops tunnels
// already is refused at once.
func TestTunnelLoop(t *testing.T) {
	t.Parallel()
	w := newTunWorld(t)
	w.startEgress("e1")
	w.startIngress()
	w.setRoute("loop", "--path", "/loop", "--upstream", w.base)

	a := w.send("GET", "/loop/orders", nil)
	if a.status != http.StatusLoopDetected || a.outcome() != ingress.OutcomeNotExecuted || !strings.Contains(a.body, "forwarding loop") {
		t.Fatalf("a request routed back to its ingress: %v; want 508 %q naming the loop", a, ingress.OutcomeNotExecuted)
	}
	if n := len(logLines(w.ingress, "forwarding loop", "hops="+strconv.Itoa(upstream.MaxHops))); n != 1 {
		t.Errorf("the ingress refused %d requests as a loop with hops=%d, want 1:\n%s", n, upstream.MaxHops, strings.Join(logLines(w.ingress, "loop"), "\n"))
	}
	st := w.waitSettled(10 * time.Second)
	if st.EntriesAdded != upstream.MaxHops {
		t.Errorf("the tunnel carried %d requests, want %d: one per crossing", st.EntriesAdded, upstream.MaxHops)
	}
	t.Logf("loop refused after %v; the service settled at %+v", a.elapsed, st)

	b := w.send("GET", "/loop/orders", nil, upstream.HopsHeader, strconv.Itoa(upstream.MaxHops))
	if b.status != http.StatusLoopDetected || !strings.Contains(b.body, strconv.Itoa(upstream.MaxHops)+" times") {
		t.Errorf("a request that crossed %d tunnels already: %v; want 508 at once", upstream.MaxHops, b)
	}
}
