package tunnel

import (
	"fmt"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/rprtunnel/rpr/internal/wire"
)

// Admission control keeps a service's queue below its cap without costing a
// round trip per call: each client refreshes a backlog figure (request
// stream length plus retry set size) every wire.BeatInterval, and refuses
// calls while that figure is at or above the watermark. Async enqueues also
// check the cap itself inside enqueueScript, so the cap holds even against
// many clients acting on the same stale figure; nothing already queued is
// ever trimmed to make room.

// backlogStale is how old a backlog figure may be and still be trusted;
// an older one (Redis unreachable) admits calls, and the cap in
// enqueueScript still holds.
const backlogStale = 2 * wire.BeatInterval

// backlog is a client's cached view of one service's queue.
type backlog struct {
	mu      sync.Mutex
	size    int64     // entries in the stream plus the retry set
	at      time.Time // when size was read; zero before the first read
	drained float64   // entries per second the queue shrank by, last interval
}

// observe records a new backlog figure.
func (b *backlog) observe(size int64, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.at.IsZero() {
		if dt := at.Sub(b.at).Seconds(); dt > 0 {
			b.drained = float64(b.size-size) / dt
		}
	}
	b.size, b.at = size, at
}

// read returns the figure, and false when there is none fresh enough.
func (b *backlog) read() (size int64, drained float64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.at.IsZero() || time.Since(b.at) > backlogStale {
		return 0, 0, false
	}
	return b.size, b.drained, true
}

// maxBacklog is the cap of method's service: its proto option, else the
// client's default.
func (c *Client) maxBacklog(method *MethodDesc) int64 {
	if method.Service.MaxBacklog > 0 {
		return method.Service.MaxBacklog
	}
	return c.opts.MaxBacklog
}

// shareOfCap is the part of a service's cap that each of its shards'
// queues may hold: the enqueue script holds each queue to it, so that the
// service as a whole stays within the cap.
func shareOfCap(capacity int64, shards int) int64 {
	if shards <= 1 {
		return capacity
	}
	return (capacity + int64(shards) - 1) / int64(shards)
}

// admit refuses a call while the service's cached backlog is at or above
// watermark × capacity.
func (s *clientService) admit(full, rid string, capacity int64, watermark float64) error {
	size, _, ok := s.backlog.read()
	limit := int64(float64(capacity) * watermark)
	if !ok || size < limit {
		return nil
	}
	return s.refused(full, rid, size, capacity, fmt.Sprintf("over %.0f%% of its cap", watermark*100))
}

// refused builds the RESOURCE_EXHAUSTED error for a call the queue has no
// room for, with a RetryInfo detail saying when to try again.
func (s *clientService) refused(full, rid string, size, capacity int64, where string) error {
	after := s.retryAfter(size, capacity)
	e := notExecutedf(ResourceExhausted, "%s [%s]: refused: the queue of %s holds %d request(s), %s of %d (servers are behind or down); not enqueued, retry after %v",
		full, rid, s.name, size, where, capacity, after)
	return withRefusal(e, ReasonQueueFull, after)
}

// retryAfter estimates when the queue will have room again from how fast
// it drained during the last interval: the time to drain a tenth of the
// cap, between 1s and 1m; 5s when it is not draining.
func (s *clientService) retryAfter(size, capacity int64) time.Duration {
	_, drained, ok := s.backlog.read()
	if !ok || drained <= 0 {
		return 5 * time.Second
	}
	d := time.Duration(float64(capacity) / 10 / drained * float64(time.Second))
	return min(max(d, time.Second), time.Minute).Round(100 * time.Millisecond)
}

// RetryAfter returns the retry-after hint of a refused call (a RetryInfo
// detail), and false when err carries none.
func RetryAfter(err error) (time.Duration, bool) {
	e := toError(err)
	if e == nil {
		return 0, false
	}
	for _, d := range e.details {
		info := new(errdetails.RetryInfo)
		if d.MessageIs(info) && d.UnmarshalTo(info) == nil {
			return info.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}
