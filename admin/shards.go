package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/tunnel"
)

// ErrShardsHoldRequests is what Service.SetShards's refusal wraps:
// lowering the shard count would strand requests or dead letters. Test for
// it with errors.Is.
var ErrShardsHoldRequests = errors.New("shards that would go still hold requests")

// Shards returns the number of shards recorded for the service: 1 when it
// is not sharded. One GET.
func (s *Service) Shards(ctx context.Context) (int, error) {
	raw, err := s.rdb.Get(ctx, s.keys.ShardCount(s.name)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("rpr: read shard count of %s: %w", s.name, err)
	}
	return store.ParseShardCount(raw, err), nil
}

// SetShards changes the number of shards of the service, from 1 to
// tunnel.MaxShards. Raising it is always safe. Lowering it is refused,
// with an error wrapping ErrShardsHoldRequests, while any shard that would
// go still holds a request (queued, running or waiting for a retry, in any
// lane) or a dead letter; drain those first: stop the clients, or route
// elsewhere, and wait for `rpr stats` to show them empty. Clients and
// servers pick the new count up within a second. (The check and the change
// are two steps, as the keys live in different slots: a request a client
// sends in between still lands in a shard that the running servers keep
// reading.) Lowering SCANs the keyspace for the service's lanes.
func (s *Service) SetShards(ctx context.Context, n int) error {
	if n < 1 || n > tunnel.MaxShards {
		return fmt.Errorf("rpr: %s: shard count %d: want 1 to %d", s.name, n, tunnel.MaxShards)
	}
	current, err := s.Shards(ctx)
	if err != nil {
		return err
	}
	if n < current {
		if err := s.checkShardsEmpty(ctx, current, n); err != nil {
			return err
		}
	}
	if err := s.rdb.Set(ctx, s.keys.ShardCount(s.name), n, 0).Err(); err != nil {
		return fmt.Errorf("rpr: set shard count of %s: %w", s.name, err)
	}
	return nil
}

// checkShardsEmpty refuses, wrapping ErrShardsHoldRequests, when a shard
// from n to current-1 holds requests or dead letters.
func (s *Service) checkShardsEmpty(ctx context.Context, current, n int) error {
	lanes, err := s.laneNames(ctx)
	if err != nil {
		return err
	}
	going := s.keys.Shards(s.name, n, current)
	_, held, err := s.queueBacklog(ctx, going, lanes)
	if err != nil {
		return err
	}
	for i, sk := range going {
		shard := n + i
		letters, err := s.rdb.XLen(ctx, sk.DeadLetters()).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("rpr: count dead letters of %s shard %d: %w", s.name, shard, err)
		}
		if letters > 0 {
			return fmt.Errorf("rpr: %s: refusing to go from %d to %d shards: shard %d holds %d dead letters, which `rpr dlq` would no longer list (%w); replay or drop them first (`rpr dlq ls %s`)", s.name, current, n, shard, letters, ErrShardsHoldRequests, s.name)
		}
		if held[i] > 0 {
			return fmt.Errorf("rpr: %s: refusing to go from %d to %d shards: shard %d still holds %d requests, which would be stranded (%w); let it drain (stop sending, wait for `rpr stats` to show the service empty) and try again", s.name, current, n, shard, held[i], ErrShardsHoldRequests)
		}
	}
	return nil
}

// queueBacklog counts the requests lanes hold in shards of the service: in their
// request streams (queued and running) and retry sets, added up by lane
// and by shard (byShard[i] is shards[i]'s), in one pipelined round trip.
func (s *Service) queueBacklog(ctx context.Context, shards []store.Shard, lanes []string) (byLane map[string]int64, byShard []int64, err error) {
	pipe := s.rdb.Pipeline()
	cmds := make([][]*redis.IntCmd, len(shards)) // [shard][2*lane], [2*lane+1]
	for i, sk := range shards {
		for _, lane := range lanes {
			cmds[i] = append(cmds[i], pipe.XLen(ctx, sk.Requests(lane)), pipe.ZCard(ctx, sk.Retries(lane)))
		}
	}
	_, _ = pipe.Exec(ctx)
	byLane, byShard = map[string]int64{}, make([]int64, len(shards))
	for i, shardCmds := range cmds {
		for j, cmd := range shardCmds {
			if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
				return nil, nil, fmt.Errorf("rpr: count requests in %s: %w", shards[i].Tag, err)
			}
			byLane[lanes[j/2]] += cmd.Val()
			byShard[i] += cmd.Val()
		}
	}
	return byLane, byShard, nil
}
