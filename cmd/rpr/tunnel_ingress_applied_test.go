package main

import (
	"net/http"
	"testing"
)

// TestTunnelIngressAppliedWhenSetReturns: once rpr upstreams set has
// printed "no request goes by the old table now", the ingress must decide
// by the new table too: a new route is not 404, a route made async
// answers 202, one made sync answers 200.
func TestTunnelIngressAppliedWhenSetReturns(t *testing.T) {
	w := newTunWorld(t)
	_, up := startUpstream(t, "upstream", func(rw http.ResponseWriter, _ *http.Request, hit *tunHit, _ []byte) int {
		return upReply(rw, hit, http.StatusOK)
	})
	w.startEgress("e1")
	w.setRoute("r", "--path", "/r", "--upstream", up.URL)
	w.startIngress()
	for i, mode := range []string{"async", "sync", "async", "sync"} {
		w.setRoute("r", "--path", "/r", "--upstream", up.URL, "--mode", mode)
		want := map[string]int{"async": http.StatusAccepted, "sync": http.StatusOK}[mode]
		if a := w.send("POST", "/r/x", []byte("x")); a.status != want {
			t.Errorf("change %d: route made %s; the next request got %v, want %d", i, mode, a, want)
		}
		name := string(rune('a' + i))
		w.setRoute("new-"+name, "--path", "/new-"+name, "--upstream", up.URL)
		if a := w.send("GET", "/new-"+name+"/x", nil); a.status != http.StatusOK {
			t.Errorf("route new-%s just added: the next request got %v, want 200", name, a)
		}
	}
}
