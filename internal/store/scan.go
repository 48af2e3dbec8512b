package store

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// scanCount is the COUNT hint of each SCAN step: how many keys Redis looks
// at per call, enough to walk a large keyspace in few round trips without
// blocking the server for long.
const scanCount = 1000

// ScanEveryMaster calls found with each key matching one of patterns
// (Keyspace.ServicePatterns, Shard.LanePatterns), by SCAN (never KEYS) on
// rdb, or on every master of a Redis Cluster, whose keys are spread over
// them. The masters are scanned in parallel, but found is called under a
// lock, so it needs none of its own. A SCAN visits the whole keyspace: it
// is for operators' tools, never for hot paths.
func ScanEveryMaster(ctx context.Context, rdb redis.UniversalClient, patterns []string, found func(key string)) error {
	var mu sync.Mutex
	scan := func(ctx context.Context, node redis.Cmdable) error {
		for _, pattern := range patterns {
			iter := node.Scan(ctx, 0, pattern, scanCount).Iterator()
			for iter.Next(ctx) {
				mu.Lock()
				found(iter.Val())
				mu.Unlock()
			}
			if err := iter.Err(); err != nil {
				return err
			}
		}
		return nil
	}
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		return cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	}
	return scan(ctx, rdb)
}
