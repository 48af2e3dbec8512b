package tunnel

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
)

// A service may be sharded over N hash tags, {S} (shard 0) and {S#1} to
// {S#N-1}, so that a Redis Cluster spreads its queues, states and response
// streams over its masters. Each shard is a complete set of the service's
// queue keys; every Lua script touches one shard only.
//
// The count in force is recorded in Redis (rpr:v1:{S}:shards) and is the
// one clients and servers follow:
//
//   - A server or client configured for more shards than recorded raises
//     the record as it starts ((rpr.v1.service).shards, or the Shards
//     options), and the others follow within a second. Growing is always
//     safe: the new shards start empty.
//   - Servers read every shard of the record even when configured for
//     fewer, and keep reading a shard for as long as they run, so requests
//     a client sent just before a change are not stranded.
//   - The count is lowered only by SetShardCount (`rpr shards set`), which
//     refuses while a shard that would go holds any request.
//
// A call goes to a shard chosen at random; an async request with an
// idempotency key goes to the shard its key hashes to, so that the key's
// state is always found in one place (changing the count re-maps keys:
// see the README's "Changing the shard count").

// MaxShards bounds a service's shard count. Each shard costs every server
// one blocking read per lane, and every client one per shard it gets
// responses from.
const MaxShards = 64

// validShards checks a configured shard count.
func validShards(n int) error {
	if n < 1 || n > MaxShards {
		return fmt.Errorf("shard count %d: want 1 to %d", n, MaxShards)
	}
	return nil
}

// shardOfKey is the shard an idempotency key's requests go to.
func shardOfKey(key string, shards int) int {
	if shards <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(shards))
}

// shardPicker spreads calls over a service's shards.
type shardPicker struct {
	count atomic.Int32 // shards in force
}

// pick returns the shard of a call: key's when it has one, else one at
// random. (Random rather than in turn: a caller whose calls alternate
// between methods or lanes in a fixed pattern would otherwise send all of
// one kind to the same shard.)
func (p *shardPicker) pick(key string) int {
	n := int(p.count.Load())
	if n <= 1 {
		return 0
	}
	if key != "" {
		return shardOfKey(key, n)
	}
	return rand.IntN(n)
}

// raiseShards records that a service has at least n shards and returns
// the count in force.
func raiseShards(ctx context.Context, client redis.UniversalClient, keys store.Keyspace, service string, n int) (int, error) {
	call := store.NewRaiseShards(keys.ShardCount(service), n)
	store.Run(ctx, client, &call.Call)
	got, err := call.Result()
	if err != nil {
		return 0, fmt.Errorf("record shard count of %s: %w", service, err)
	}
	return got, nil
}

// parseShardCount reads a recorded shard count (GET's reply); absent or
// unreadable counts as one.
func parseShardCount(raw string, err error) int {
	if err != nil {
		return 1
	}
	n, convErr := strconv.Atoi(raw)
	if convErr != nil || validShards(n) != nil {
		return 1
	}
	return n
}

// ErrShardsHoldRequests is what SetShardCount's refusal wraps: lowering
// the shard count would strand requests. Test for it with errors.Is.
var ErrShardsHoldRequests = errors.New("shards that would go still hold requests")

// ShardCount returns the number of shards recorded for service under
// prefix ("" for DefaultPrefix): 1 when the service is not sharded.
func ShardCount(ctx context.Context, rdb redis.UniversalClient, prefix, service string) (int, error) {
	keys := store.NewKeyspace(orDefaultPrefix(prefix))
	raw, err := rdb.Get(ctx, keys.ShardCount(service)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("rpr: read shard count of %s: %w", service, err)
	}
	return parseShardCount(raw, err), nil
}

// SetShardCount changes the number of shards of service. Raising it is
// always safe. Lowering it is refused, with an error wrapping
// ErrShardsHoldRequests, while any shard that would go still holds a
// request (queued, running or waiting for a retry, in any lane); drain
// those first: stop the clients, or route elsewhere, and wait for `rpr
// stats` to show them empty. Clients and servers pick the new count up
// within a second. (The check and the change are two steps, as the keys
// live in different slots: a request a client sends in between still
// lands in a shard that the running servers keep reading.)
func SetShardCount(ctx context.Context, rdb redis.UniversalClient, prefix, service string, n int) error {
	if err := validShards(n); err != nil {
		return fmt.Errorf("rpr: %s: %w", service, err)
	}
	keys := store.NewKeyspace(orDefaultPrefix(prefix))
	current, err := ShardCount(ctx, rdb, prefix, service)
	if err != nil {
		return err
	}
	if n < current {
		lanes, err := knownLanes(ctx, rdb, keys, service)
		if err != nil {
			return err
		}
		going := shardsOf(keys, service, n, current)
		_, held, err := queueBacklog(ctx, rdb, going, lanes)
		if err != nil {
			return err
		}
		for i, sk := range going {
			shard := n + i
			letters, err := rdb.XLen(ctx, sk.DeadLetters()).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return fmt.Errorf("rpr: count dead letters of %s shard %d: %w", service, shard, err)
			}
			if letters > 0 {
				return fmt.Errorf("rpr: %s: refusing to go from %d to %d shards: shard %d holds %d dead letters, which `rpr dlq` would no longer list (%w); replay or drop them first (`rpr dlq ls %s`)", service, current, n, shard, letters, ErrShardsHoldRequests, service)
			}
			if held[i] > 0 {
				return fmt.Errorf("rpr: %s: refusing to go from %d to %d shards: shard %d still holds %d requests, which would be stranded (%w); let it drain (stop sending, wait for `rpr stats` to show the service empty) and try again", service, current, n, shard, held[i], ErrShardsHoldRequests)
			}
		}
	}
	if err := rdb.Set(ctx, keys.ShardCount(service), n, 0).Err(); err != nil {
		return fmt.Errorf("rpr: set shard count of %s: %w", service, err)
	}
	return nil
}

// shardsOf returns the keys of shards from to to-1 of service.
func shardsOf(keys store.Keyspace, service string, from, to int) []store.Shard {
	out := make([]store.Shard, 0, max(to-from, 0))
	for shard := from; shard < to; shard++ {
		out = append(out, keys.Shard(service, shard))
	}
	return out
}

// queueBacklog counts the requests lanes hold in shards: in their request
// streams (queued and running) and retry sets, added up by lane and by
// shard (byShard[i] is shards[i]'s), in one pipelined round trip.
func queueBacklog(ctx context.Context, rdb redis.UniversalClient, shards []store.Shard, lanes []string) (byLane map[string]int64, byShard []int64, err error) {
	pipe := rdb.Pipeline()
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

// orDefaultPrefix returns prefix, or DefaultPrefix when it is empty.
func orDefaultPrefix(prefix string) string {
	if prefix == "" {
		return DefaultPrefix
	}
	return prefix
}
