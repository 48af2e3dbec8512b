package tunnel

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// LaneStatus is what an operator needs to know about one lane of a
// service before routing traffic to it or away from it.
type LaneStatus struct {
	Lane string
	// LiveWorkers counts the servers serving the lane now.
	LiveWorkers int
	// Queued counts the requests the lane holds over all shards: in its
	// streams (waiting and running) and its retry sets.
	Queued int64
	// Routed is true when some route sends calls to the lane (the default
	// lane always counts as routed: it takes what no rule matches).
	Routed bool
}

// Lanes returns the status of every lane of service that some route names,
// some live server serves, that still holds requests in some shard, or
// that is the default, sorted by name with the default first. (Finding the
// lanes that hold requests scans the keyspace: an operator's call, not one
// for hot paths.)
func Lanes(ctx context.Context, rdb redis.UniversalClient, prefix, service string) ([]LaneStatus, error) {
	keys := keyspace{prefix: orDefaultPrefix(prefix)}
	pipe := rdb.Pipeline()
	timeCmd := pipe.Time(ctx)
	beats := pipe.HGetAll(ctx, keys.workers(service))
	routes := pipe.HGetAll(ctx, keys.routes(service))
	count := pipe.Get(ctx, keys.shardCount(service))
	_, _ = pipe.Exec(ctx)
	for _, cmd := range []redis.Cmder{timeCmd, beats, routes} {
		if err := cmd.Err(); err != nil {
			return nil, fmt.Errorf("rpr: read lanes of %s: %w", service, err)
		}
	}
	live := liveWorkersByLane(beats.Val(), timeCmd.Val().UnixMilli())
	table, _ := parseRouteTable(service, routes.Val())
	byLane := map[string]*LaneStatus{DefaultLane: {Lane: DefaultLane, Routed: true}}
	for _, lane := range table.lanes() {
		byLane[lane] = &LaneStatus{Lane: lane, Routed: true}
	}
	for lane, n := range live {
		if byLane[lane] == nil {
			byLane[lane] = &LaneStatus{Lane: lane}
		}
		byLane[lane].LiveWorkers = n
	}
	shards := parseShardCount(count.Result())
	held, err := lanesWithKeys(ctx, rdb, keys, service, shards)
	if err != nil {
		return nil, err
	}
	for _, lane := range held {
		if byLane[lane] == nil {
			byLane[lane] = &LaneStatus{Lane: lane}
		}
	}
	out := make([]LaneStatus, 0, len(byLane))
	for _, st := range byLane {
		for shard := range shards {
			n, err := shardBacklog(ctx, rdb, keys.shard(service, shard), []string{st.Lane})
			if err != nil {
				return nil, err
			}
			st.Queued += n
		}
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool {
		if (out[i].Lane == DefaultLane) != (out[j].Lane == DefaultLane) {
			return out[i].Lane == DefaultLane
		}
		return out[i].Lane < out[j].Lane
	})
	return out, nil
}

// lanesWithKeys finds the lanes that have a request stream or retry set in
// some shard of service, by SCAN (on every master of a Cluster).
func lanesWithKeys(ctx context.Context, rdb redis.UniversalClient, keys keyspace, service string, shards int) ([]string, error) {
	var patterns []string
	for shard := range shards {
		tag := globEscape(keys.shard(service, shard).tag)
		patterns = append(patterns, tag+":req:*", tag+":retry:*")
	}
	var mu sync.Mutex
	found := map[string]bool{}
	scan := func(ctx context.Context, node redis.Cmdable) error {
		for _, pattern := range patterns {
			iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				key := iter.Val()
				lane := key[strings.LastIndex(key, ":")+1:]
				if ValidateLane(lane) == nil {
					mu.Lock()
					found[lane] = true
					mu.Unlock()
				}
			}
			if err := iter.Err(); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		err = cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	} else {
		err = scan(ctx, rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("rpr: find the lanes of %s: %w", service, err)
	}
	return slices.Sorted(maps.Keys(found)), nil
}

// knownLanes lists the lanes of service that routes name or workers serve,
// the default lane first.
func knownLanes(ctx context.Context, rdb redis.UniversalClient, keys keyspace, service string) ([]string, error) {
	statuses, err := Lanes(ctx, rdb, keys.prefix, service)
	if err != nil {
		return nil, err
	}
	lanes := make([]string, len(statuses))
	for i, st := range statuses {
		lanes[i] = st.Lane
	}
	return lanes, nil
}

// DrainResult says what DrainLane moved.
type DrainResult struct {
	// Moved counts requests moved to the target lane (from streams and
	// retry sets); Left counts those still in the lane, held by its live
	// servers, which finish them.
	Moved, Left int64
}

// drainBatch is how many entries one moveLaneScript call moves.
const drainBatch = 500

// DrainLane moves the requests queued in lane `from` of service, in every
// shard, to lane `to`, so that they are served there instead of stranded:
// use it when a lane loses its route and its servers are gone (or about to
// go). Requests the lane's live servers are running stay theirs; when the
// lane has no live server, also those its dead servers had taken move, and
// the target lane's servers settle them like requests of a crashed worker
// (run again only when idempotent). Nothing is lost or duplicated: each
// request moves in one atomic step.
func DrainLane(ctx context.Context, rdb redis.UniversalClient, prefix, service, from, to string) (DrainResult, error) {
	if err := ValidateLane(from); err != nil {
		return DrainResult{}, err
	}
	if err := ValidateLane(to); err != nil {
		return DrainResult{}, err
	}
	if from == to {
		return DrainResult{}, fmt.Errorf("rpr: drain lane %s into itself: name another lane to move its requests to", from)
	}
	keys := keyspace{prefix: orDefaultPrefix(prefix)}
	statuses, err := Lanes(ctx, rdb, prefix, service)
	if err != nil {
		return DrainResult{}, err
	}
	orphaned := "1"
	for _, st := range statuses {
		if st.Lane == from && st.LiveWorkers > 0 {
			orphaned = "0"
		}
	}
	shards, err := ShardCount(ctx, rdb, prefix, service)
	if err != nil {
		return DrainResult{}, err
	}
	var res DrainResult
	for shard := range shards {
		sk := keys.shard(service, shard)
		k := []string{sk.requests(from), sk.requests(to), sk.retries(from), sk.retries(to)}
		for {
			out, err := moveLaneScript.Run(ctx, rdb, k, workersGroup, drainBatch, orphaned).Int64Slice()
			if err != nil {
				return res, fmt.Errorf("rpr: drain lane %s of %s (shard %d): %w", from, service, shard, err)
			}
			res.Moved += out[0] + out[1]
			if out[0]+out[1] < drainBatch {
				res.Left += out[2]
				break
			}
		}
	}
	return res, nil
}
