package tunnel

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
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
//   - A server configured for more shards than recorded raises the record
//     as it starts ((rpr.v1.service).shards, or ServerOptions.Shards), and
//     the others follow within a second. Growing is always safe: the new
//     shards start empty. A client never raises it (a caller must not be
//     able to make every server open more readers than its pool holds):
//     it follows the record, one shard while none is recorded.
//   - Servers read every shard of the record even when configured for
//     fewer, and keep reading a shard for as long as they run, so requests
//     a client sent just before a change are not stranded.
//   - The count is lowered only by an operator (admin.Service.SetShards,
//     `rpr shards set`), who is refused while a shard that would go holds
//     any request.
//
// A call goes to a shard chosen at random; an async request with an
// idempotency key goes to the shard its key hashes to, so that the key's
// state is always found in one place (changing the count re-maps keys:
// see "Changing the shard count" in docs/operations.md).

// MaxShards bounds a service's shard count. Each shard costs every server
// one blocking read per lane, and every client one per shard it gets
// responses from.
const MaxShards = store.MaxShards

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
