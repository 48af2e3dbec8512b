package tunnel

import (
	"sync"
	"sync/atomic"
	"time"
)

// redisClock tells Redis's time from the local clock plus a measured offset.
// Deadlines in envelopes are on Redis's clock, so a client and a server on
// different hosts agree on them even when their own clocks differ: each side
// measures its offset to the one Redis both can reach.
//
// A TIME reply is taken to be from the middle of its round trip, which is
// off by up to half the round trip when the request and the reply waited
// unequally (a TIME pipelined behind slow commands). So the clock keeps
// the sample with the shortest round trip of the last clockWindow, the
// most accurate one, instead of the latest: under load the two sides'
// views of one deadline drifted apart by over 100 ms otherwise.
type redisClock struct {
	offset atomic.Int64 // nanoseconds to add to local time

	mu   sync.Mutex
	best clockSample // the sample in use
}

// clockWindow is how long the best sample is kept before a newer one, of
// any round trip, replaces it, so that drift of the local clock is
// followed.
const clockWindow = 30 * time.Second

// clockSample is one TIME reply, read as an offset.
type clockSample struct {
	offset time.Duration // Redis's time minus local time
	rtt    time.Duration
	at     time.Time // when the reply came
}

// observe records a Redis TIME reply obtained between sent and received.
func (c *redisClock) observe(redisNow, sent, received time.Time) {
	rtt := received.Sub(sent)
	s := clockSample{offset: redisNow.Sub(sent.Add(rtt / 2)), rtt: rtt, at: received}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.best.at.IsZero() || s.rtt <= c.best.rtt || s.at.Sub(c.best.at) > clockWindow || !consistent(s, c.best) {
		c.best = s
		c.offset.Store(int64(s.offset))
	}
}

// consistent reports whether two samples can both be right: each is off
// by at most half its round trip. Samples that cannot mean a clock was
// stepped (or Redis failed over to a host whose clock differs): the
// newer one is taken at once.
func consistent(a, b clockSample) bool {
	diff := a.offset - b.offset
	if diff < 0 {
		diff = -diff
	}
	return diff <= (a.rtt+b.rtt)/2
}

// toLocal converts unix milliseconds on Redis's clock to local time.
func (c *redisClock) toLocal(redisMillis int64) time.Time {
	return time.UnixMilli(redisMillis).Add(-time.Duration(c.offset.Load()))
}

// toRedis converts a local time to unix milliseconds on Redis's clock.
func (c *redisClock) toRedis(local time.Time) int64 {
	return local.Add(time.Duration(c.offset.Load())).UnixMilli()
}
