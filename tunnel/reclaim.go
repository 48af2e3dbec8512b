package tunnel

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/xread"
)

// reclaimInterval is how often a reader scans for requests a dead worker
// left behind: a quarter of a lease, at most a second (it is also the
// reader's block time, so shutdown never waits longer than that).
func (s *Server) reclaimInterval() time.Duration {
	return min(max(s.opts.Lease/4, 10*time.Millisecond), time.Second)
}

// reclaimOnce takes over up to slots request entries of q that have sat
// unacknowledged in some worker's pending list for longer than a lease,
// scanning from start; it returns where the next scan begins and how many
// slots the taken entries hold (the rest stay the caller's).
//
// A live worker resets the idle time of what it runs every third of a lease,
// so only entries of a worker that died (or stalled for a whole lease) are
// found. They go through beginScript like new ones, which decides whether
// they run again, told which worker held them: the idle entries' owners
// are listed (XPENDING IDLE) before they are claimed, and when there are
// none, as on a healthy server, the scan ends there: one command a scan
// rather than two. Entries
// Redis reports as deleted while pending (trimmed or removed before they
// were acknowledged) are recorded; XAUTOCLAIM drops them from the pending
// list itself, so the scan never loops on them.
func (r *serveRun) reclaimOnce(ctx context.Context, q *queue, start string, slots int) (next string, used int) {
	s := r.server
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	owners, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: q.requests,
		Group:  store.WorkersGroup,
		Idle:   s.opts.Lease,
		Start:  start,
		End:    "+",
		Count:  int64(slots),
	}).Result()
	switch {
	case err != nil:
		s.log.Warn("rpr: reclaim scan", "stream", q.requests, "error", err)
		return start, 0
	case len(owners) == 0:
		return "0-0", 0 // nothing idle from start on: the next scan starts over
	}
	msgs, next, deleted, err := s.rdb.XAutoClaimWithDeleted(ctx, &redis.XAutoClaimArgs{
		Stream:   q.requests,
		Group:    store.WorkersGroup,
		Consumer: s.opts.WorkerID,
		MinIdle:  s.opts.Lease,
		Start:    start,
		Count:    int64(slots),
	}).Result()
	if err != nil {
		s.log.Warn("rpr: reclaim scan", "stream", q.requests, "error", err)
		return start, 0
	}
	for _, id := range deleted {
		s.stats.deletedWhilePending.Add(1)
		s.log.Warn("rpr: request entry deleted while pending (trimmed before it was acknowledged); dropped from the pending list", "stream", q.requests, "entry", id)
	}
	if len(msgs) > 0 {
		s.log.Info("rpr: reclaimed request entries idle for longer than a lease", "stream", q.requests, "count", len(msgs))
		previous := map[string]string{} // entry id -> the worker that held it
		for _, p := range owners {
			previous[p.ID] = p.Consumer
		}
		r.process(ctx, q, xread.FromMessages(msgs), previous, 0)
	}
	return next, len(msgs)
}
