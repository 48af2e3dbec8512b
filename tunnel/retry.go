package tunnel

import (
	"errors"
	"math/rand/v2"
	"slices"
	"time"
)

// RetryPolicy says how a client retries a failed call. A call is retried
// only when all of these hold:
//
//   - its code is one of RetryableCodes (by default only UNAVAILABLE);
//   - a retry cannot do harm: the request provably did not execute
//     (NotExecuted: it was never sent, Redis refused it, or it was
//     withdrawn from the queue unrun), or the method is idempotent. A
//     call whose send's outcome is unknown (the connection broke after
//     writing) is retried only for an idempotent method: a unary request
//     keeps no state that would recognise the retry, so retrying a
//     non-idempotent one could run it twice;
//   - attempts remain, and the backoff ends before the call's deadline.
//
// DEADLINE_EXCEEDED and CANCELED are never retried: the caller's time is up.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt too (default 3).
	MaxAttempts int
	// InitialBackoff is the pause before the second attempt (default
	// 200ms); each later pause is Multiplier times longer (default 2), up
	// to MaxBackoff (default 5s). Each pause varies by ±20% (jitter) so that
	// many clients do not retry in lock step.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	Multiplier     float64
	// RetryableCodes lists the codes worth retrying (default UNAVAILABLE).
	RetryableCodes []Code
}

// DefaultRetryPolicy is the policy WithRetry(RetryPolicy{}) stands for.
var DefaultRetryPolicy = RetryPolicy{
	MaxAttempts:    3,
	InitialBackoff: 200 * time.Millisecond,
	MaxBackoff:     5 * time.Second,
	Multiplier:     2,
	RetryableCodes: []Code{Unavailable},
}

// withDefaults fills unset fields from DefaultRetryPolicy; a nil policy
// gives the defaults.
func (p *RetryPolicy) withDefaults() RetryPolicy { return p.over(DefaultRetryPolicy) }

// over returns base with the fields p sets replacing base's; a nil p gives
// base.
func (p *RetryPolicy) over(base RetryPolicy) RetryPolicy {
	out := base
	if p == nil {
		return out
	}
	if p.MaxAttempts > 0 {
		out.MaxAttempts = p.MaxAttempts
	}
	if p.InitialBackoff > 0 {
		out.InitialBackoff = p.InitialBackoff
	}
	if p.MaxBackoff > 0 {
		out.MaxBackoff = p.MaxBackoff
	}
	if p.Multiplier >= 1 {
		out.Multiplier = p.Multiplier
	}
	if len(p.RetryableCodes) > 0 {
		out.RetryableCodes = p.RetryableCodes
	}
	return out
}

// allows reports whether a call that failed with err on attempt may be
// tried again.
func (p RetryPolicy) allows(err error, method *MethodDesc, attempt int) bool {
	if attempt >= p.MaxAttempts {
		return false
	}
	var e *Error
	if !errors.As(err, &e) || !slices.Contains(p.RetryableCodes, e.code) {
		return false
	}
	if e.code == DeadlineExceeded || e.code == Canceled {
		return false
	}
	// An attempt that may have run is tried again only for an idempotent
	// method: unary requests keep no state that would recognise the retry
	// (store.NewArbiter), so the retry of a non-idempotent call could run it
	// twice.
	return e.notExecuted || method.Idempotent
}

// backoff returns the pause after the given failed attempt (1-based).
func (p RetryPolicy) backoff(attempt int) time.Duration {
	d := float64(p.InitialBackoff)
	for range attempt - 1 {
		d *= p.Multiplier
	}
	d = min(d, float64(p.MaxBackoff))
	return time.Duration(d * (0.8 + 0.4*rand.Float64()))
}
