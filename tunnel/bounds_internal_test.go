package tunnel

import (
	"math"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// TestCallerNumbersAreBounded: what a caller's envelope asks of a server
// is bounded, so no request retries forever or gets a time limit that
// overflows into the past (it would be retired unrun and undead-lettered).
func TestCallerNumbersAreBounded(t *testing.T) {
	env := &wire.Request{
		Timeout: math.MaxInt64 / 2, // ms: overflows a time.Duration
		Retry:   &wire.RetryPolicy{MaxAttempts: 1 << 40, InitialBackoff: math.MaxInt64, MaxBackoff: -5, Multiplier: 1e300},
	}
	if got := asyncTimeout(env, nil); got != MaxAsyncTimeout {
		t.Errorf("asyncTimeout = %v, want MaxAsyncTimeout (%v)", got, MaxAsyncTimeout)
	}
	p := asyncPolicy(env, nil)
	if p.MaxAttempts != MaxAsyncAttempts || p.InitialBackoff != MaxRetryBackoff || p.MaxBackoff != DefaultAsyncRetryPolicy.MaxBackoff || p.Multiplier != MaxRetryMultiplier {
		t.Errorf("policy = %+v, want attempts %d, initial backoff %v, the default max backoff, multiplier %d", p, MaxAsyncAttempts, MaxRetryBackoff, MaxRetryMultiplier)
	}
	if b := p.backoff(MaxAsyncAttempts); b <= 0 || b > 2*MaxRetryBackoff {
		t.Errorf("backoff of the last attempt = %v, want a positive duration within the bound", b)
	}
	env.Retry = &wire.RetryPolicy{MaxAttempts: 3, InitialBackoff: 250, Multiplier: math.NaN()}
	if p := asyncPolicy(env, nil); p.MaxAttempts != 3 || p.InitialBackoff != 250*time.Millisecond || p.Multiplier != DefaultAsyncRetryPolicy.Multiplier {
		t.Errorf("a reasonable policy came out as %+v", p)
	}
}

// TestStateTTLNeverOverflows: a deadline centuries ahead (the caller's to
// choose) keeps its state for MaxStateTTL plus the margin, not for a
// wrapped-around negative time that would expire it at once.
func TestStateTTLNeverOverflows(t *testing.T) {
	far := time.Unix(1<<62, 0)
	if got, want := stateTTL(far, time.Now()), store.MaxStateTTL+stateMargin; got != want {
		t.Errorf("stateTTL(%v) = %v, want %v", far, got, want)
	}
	if got := stateTTL(time.Now().Add(time.Minute), time.Now()); got <= stateMargin || got > time.Minute+stateMargin {
		t.Errorf("stateTTL(in a minute) = %v, want a minute plus the margin", got)
	}
}
