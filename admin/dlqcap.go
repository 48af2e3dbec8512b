package admin

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// DeadLetterCapacity is how full a service's dead-letter streams are
// against the cap its servers keep them under
// (tunnel.ServerOptions.MaxDeadLetters). At the cap servers drop and trim
// nothing: they hold further dead letters back (async requests wait in
// their retry sets, unreadable entries stay pending) until letters are
// replayed or dropped.
type DeadLetterCapacity struct {
	// Cap is the most entries each dead-letter stream (one per shard)
	// takes: the smallest cap the service's live workers announce; 0 when
	// none announces one (no live worker, or workers of a release without
	// the cap).
	Cap int64
	// Lengths is each shard's dead-letter stream length, shard 0 first.
	Lengths []int64
	// Full lists the shards whose dead-letter stream is at Cap.
	Full []int
}

// Capacity reads the service's dead-letter cap and how full each of its
// dead-letter streams is: two round trips (the service's view with its
// heartbeats, then one XLEN per shard, pipelined).
func (q *DeadLetters) Capacity(ctx context.Context) (DeadLetterCapacity, error) {
	view, err := q.svc.view(ctx)
	if err != nil {
		return DeadLetterCapacity{}, fmt.Errorf("rpr: dead-letter capacity of %s: %w", q.svc.name, err)
	}
	out := DeadLetterCapacity{Cap: view.deadLetterCap(), Lengths: make([]int64, view.shards)}
	pipe := q.svc.rdb.Pipeline()
	lens := make([]*redis.IntCmd, view.shards)
	for shard, sk := range q.svc.keys.Shards(q.svc.name, 0, view.shards) {
		lens[shard] = pipe.XLen(ctx, sk.DeadLetters())
	}
	_, _ = pipe.Exec(ctx)
	for shard, cmd := range lens {
		if err := cmd.Err(); err != nil {
			return DeadLetterCapacity{}, fmt.Errorf("rpr: length of %s: %w", q.svc.keys.Shard(q.svc.name, shard).DeadLetters(), err)
		}
		out.Lengths[shard] = cmd.Val()
		if out.Cap > 0 && cmd.Val() >= out.Cap {
			out.Full = append(out.Full, shard)
		}
	}
	return out, nil
}
