package tunnel

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// reclaim takes over, every quarter of a lease, the request entries of svc
// that have sat unacknowledged in some worker's pending list for longer
// than a lease: their worker died (or froze) after receiving them, since a
// live worker resets the idle time of what it runs. Taken-over entries go
// through beginScript like new ones, which decides whether they run again.
// Entries Redis reports as deleted while pending (trimmed or removed
// before they were acknowledged) are recorded and dropped from the pending
// list by XAUTOCLAIM itself, so the scan never loops on them.
func (r *serveRun) reclaim(ctx context.Context, svc *serverService) {
	s := r.server
	t := time.NewTicker(max(s.opts.Lease/4, 10*time.Millisecond))
	defer t.Stop()
	start := "0-0"
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start = r.reclaimOnce(ctx, svc, start)
	}
}

// reclaimOnce scans one page of the pending list from start and returns
// where the next scan begins.
func (r *serveRun) reclaimOnce(ctx context.Context, svc *serverService, start string) string {
	s := r.server
	slots := r.takeSlots(s.opts.BatchSize)
	if slots == 0 {
		return start // busy: reclaim when handlers free up
	}
	readCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	msgs, next, deleted, err := s.rdb.XAutoClaimWithDeleted(readCtx, &redis.XAutoClaimArgs{
		Stream:   svc.requests,
		Group:    workersGroup,
		Consumer: s.opts.WorkerID,
		MinIdle:  s.opts.Lease,
		Start:    start,
		Count:    int64(slots),
	}).Result()
	if err != nil {
		r.releaseSlots(slots)
		if ctx.Err() == nil {
			s.log.Warn("rpr: reclaim scan", "stream", svc.requests, "error", err)
		}
		return start
	}
	for _, id := range deleted {
		s.stats.deletedWhilePending.Add(1)
		s.log.Warn("rpr: request entry deleted while pending (trimmed before it was acknowledged); dropped from the pending list", "stream", svc.requests, "entry", id)
	}
	r.releaseSlots(slots - len(msgs))
	if len(msgs) > 0 {
		s.log.Info("rpr: reclaimed request entries idle for longer than a lease", "stream", svc.requests, "count", len(msgs))
	}
	r.process(readCtx, svc, msgs)
	return next
}
