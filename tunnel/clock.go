package tunnel

import (
	"sync/atomic"
	"time"
)

// redisClock tells Redis's time from the local clock plus a measured offset.
// Deadlines in envelopes are on Redis's clock, so a client and a server on
// different hosts agree on them even when their own clocks differ: each side
// measures its offset to the one Redis both can reach.
type redisClock struct {
	offset atomic.Int64 // nanoseconds to add to local time
}

// observe records a Redis TIME reply obtained between sent and received.
func (c *redisClock) observe(redisNow, sent, received time.Time) {
	mid := sent.Add(received.Sub(sent) / 2)
	c.offset.Store(int64(redisNow.Sub(mid)))
}

// toLocal converts unix milliseconds on Redis's clock to local time.
func (c *redisClock) toLocal(redisMillis int64) time.Time {
	return time.UnixMilli(redisMillis).Add(-time.Duration(c.offset.Load()))
}

// toRedis converts a local time to unix milliseconds on Redis's clock.
func (c *redisClock) toRedis(local time.Time) int64 {
	return local.Add(time.Duration(c.offset.Load())).UnixMilli()
}
