package tunnel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// inFlightSlots bounds a Client's calls in flight. A call that finds every
// slot taken waits for one, as long as its context allows; the wait is
// measured (rpr.client.slot_wait), so a client that needs more slots, or a
// server side that is too slow, shows up in metrics before it shows up as
// latency nobody can explain.
type inFlightSlots struct {
	sem  chan struct{}
	wait metric.Float64Histogram
}

func newInFlightSlots(n int, wait metric.Float64Histogram) *inFlightSlots {
	return &inFlightSlots{sem: make(chan struct{}, n), wait: wait}
}

// acquire takes a slot for call rid of method full, waiting while ctx
// allows; release gives it back.
func (s *inFlightSlots) acquire(ctx context.Context, full, rid string, attrs []metric.RecordOption) error {
	select {
	case s.sem <- struct{}{}:
		s.wait.Record(ctx, 0, attrs...) // a list made once: no allocation per call
		return nil
	default:
	}
	began := time.Now()
	select {
	case s.sem <- struct{}{}:
		s.wait.Record(ctx, time.Since(began).Seconds(), attrs...)
		return nil
	case <-ctx.Done():
		s.wait.Record(ctx, time.Since(began).Seconds(), attrs...)
		return notExecutedf(contextCode(ctx), "%s [%s]: %v while waiting %v for one of this client's %d in-flight slots; nothing was sent (raise ClientOptions.MaxInFlight, or find why calls take long: rpr stats)",
			full, rid, ctx.Err(), time.Since(began).Round(time.Millisecond), cap(s.sem))
	}
}

// release gives back a slot acquire took.
func (s *inFlightSlots) release() { <-s.sem }
