package tunnel

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/wire"
)

// A client's services doze when unused: with no call for clientIdleAfter
// and no stream open, the watcher stops reading the service's state every
// wire.BeatInterval (eight commands a time) and only keeps the client's
// response streams alive; the next call reads the state first, in one
// round trip, so that it is judged on what is true now (live workers,
// backlog, routes, limits), not on what was true when the client went
// quiet.

const (
	// clientIdleAfter is how long a service goes without a call before
	// its client stops refreshing its state.
	clientIdleAfter = 10 * time.Second
	// dozeRenewEvery is how often a dozing service's response streams
	// have their expiry renewed: well within responseStreamTTL.
	dozeRenewEvery = responseStreamTTL / 3
	// useResolution is how stale a service's last-use mark may be: a call
	// writes the mark only when it is older, so concurrent calls do not
	// all write one shared word.
	useResolution = 100 * time.Millisecond
)

// serviceDoze is whether a client's service is dozing, and when a call
// last used it.
type serviceDoze struct {
	lastUse atomic.Int64 // unix ns, to within useResolution
	dozing  atomic.Bool
	wakeMu  sync.Mutex // one waking refresh for the calls that arrive together
	renewed time.Time  // the watcher's: when the dozing streams' expiry was last renewed
}

// markUsed records that a call uses the service now.
func (d *serviceDoze) markUsed(now time.Time) {
	if ns := now.UnixNano(); ns-d.lastUse.Load() > int64(useResolution) {
		d.lastUse.Store(ns)
	}
}

// unusedSince reports whether no call has used the service since t.
func (d *serviceDoze) unusedSince(t time.Time) bool {
	return d.lastUse.Load() < t.UnixNano()
}

// use marks s as used by a call and, when s was dozing, reads its state
// before the call goes on. A failed read leaves the last state read, as a
// failed refresh of the watcher does.
func (c *Client) use(ctx context.Context, s *clientService) {
	s.doze.markUsed(time.Now())
	if !s.doze.dozing.Load() {
		return
	}
	s.doze.wakeMu.Lock()
	defer s.doze.wakeMu.Unlock()
	if !s.doze.dozing.Load() {
		return // a call that arrived together woke it
	}
	ctx, cancel := context.WithTimeout(ctx, wire.BeatInterval*3)
	defer cancel()
	if err := c.refresh(ctx, s); err != nil && c.ctx.Err() == nil {
		c.log.Warn("rpr: refresh service state after a quiet spell", "service", s.name, "error", err)
	}
	s.doze.dozing.Store(false)
}

// dozes is the watcher's step for s: it reports whether s is dozing (no
// call since clientIdleAfter, no stream open), and then renews its
// response streams' expiry every dozeRenewEvery instead of refreshing.
func (c *Client) dozes(s *clientService, now time.Time) bool {
	if !s.doze.unusedSince(now.Add(-clientIdleAfter)) || s.openStreams() > 0 {
		return false
	}
	// A call that slips in just before the flag is set goes on with the
	// state of a second ago, as any call between refreshes does; the
	// next call reads it afresh.
	if !s.doze.dozing.Swap(true) {
		s.doze.renewed = now
		return true
	}
	if now.Sub(s.doze.renewed) >= dozeRenewEvery {
		ctx, cancel := context.WithTimeout(c.ctx, wire.BeatInterval*3)
		if err := c.renewStreams(ctx, s); err != nil && c.ctx.Err() == nil {
			c.log.Warn("rpr: renew response streams", "service", s.name, "error", err)
		} else {
			s.doze.renewed = now
		}
		cancel()
	}
	return true
}

// renewStreams extends the life of s's response streams in one round
// trip, and recreates one that disappeared.
func (c *Client) renewStreams(ctx context.Context, s *clientService) error {
	streams := s.responseStreams()
	if len(streams) == 0 {
		return nil
	}
	pipe := c.rdb.Pipeline()
	expires := renewResponseStreams(ctx, pipe, streams)
	if _, err := pipe.Exec(ctx); err != nil {
		return err // tried again on the next tick
	}
	return c.recreateExpired(ctx, streams, expires)
}

// renewResponseStreams queues on pipe the renewal of each stream's
// expiry; a refresh does it too.
func renewResponseStreams(ctx context.Context, pipe redis.Pipeliner, streams []*responseStream) []*redis.BoolCmd {
	expires := make([]*redis.BoolCmd, len(streams))
	for i, rs := range streams {
		expires[i] = pipe.PExpire(ctx, rs.key, responseStreamTTL)
	}
	return expires
}

// recreateExpired recreates each stream whose renewal found it gone
// (Redis restarted or evicted it); a failed renewal proves nothing.
func (c *Client) recreateExpired(ctx context.Context, streams []*responseStream, expires []*redis.BoolCmd) error {
	for i, rs := range streams {
		if expires[i].Err() == nil && !expires[i].Val() {
			if err := c.createResponseStream(ctx, rs); err != nil {
				return err
			}
		}
	}
	return nil
}

// openStreams is how many streaming calls s has open.
func (s *clientService) openStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}
