package tunnel

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff spaces out retries of a failing background loop: exponential
// from min to max, with full jitter so that many processes reconnecting to
// one Redis do not retry in lock step.
type backoff struct {
	min, max, next time.Duration
}

func newBackoff(min, max time.Duration) *backoff {
	return &backoff{min: min, max: max, next: min}
}

// wait sleeps for the next interval or until ctx ends.
func (b *backoff) wait(ctx context.Context) {
	d := time.Duration(rand.Int64N(int64(b.next)) + 1)
	b.next = min(b.next*2, b.max)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// reset starts again from min after a success.
func (b *backoff) reset() { b.next = b.min }
