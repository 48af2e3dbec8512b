package tunnel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/tunnel"
)

// TestBreakerLetsCallsThroughOnceAServerIsBack: calls that find no live
// server open the service's breaker, and the first refresh that finds a
// server closes it: calls succeed again without waiting out a cool-down
// (a minute here), which made a restart of a service's only server cost a
// cool-down of refused calls after the server was back.
func TestBreakerLetsCallsThroughOnceAServerIsBack(t *testing.T) {
	e := newEnv(t, envConfig{noServe: true, client: tunnel.ClientOptions{
		Breaker: tunnel.BreakerOptions{FailureThreshold: 2, CoolDown: time.Minute},
	}})
	ctx := context.Background()
	for i := range 2 {
		if _, err := e.call(ctx, "Echo", "x"); tunnel.CodeOf(err) != tunnel.Unavailable || !strings.Contains(err.Error(), "no live server") {
			t.Fatalf("call %d with no server: %v; want UNAVAILABLE, no live server", i+1, err)
		}
	}
	if _, err := e.call(ctx, "Echo", "x"); !strings.Contains(err.Error(), "circuit open") {
		t.Fatalf("third call: %v; want the breaker open", err)
	}
	e.serve()
	var err error
	waitFor(t, "a call to succeed once the server is up", func() bool {
		_, err = e.call(ctx, "Echo", "x")
		return err == nil
	})
}
