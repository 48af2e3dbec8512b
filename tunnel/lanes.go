package tunnel

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
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
// lanes that hold requests scans the store.Keyspace: an operator's call, not one
// for hot paths.)
func Lanes(ctx context.Context, rdb redis.UniversalClient, prefix, service string) ([]LaneStatus, error) {
	keys := store.NewKeyspace(orDefaultPrefix(prefix))
	out, shards, err := lanesOf(ctx, rdb, keys, service)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(out))
	for i, st := range out {
		names[i] = st.Lane
	}
	queued, _, err := queueBacklog(ctx, rdb, shardsOf(keys, service, 0, shards), names)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Queued = queued[out[i].Lane]
	}
	return out, nil
}

// lanesOf returns the lanes Lanes reports (Queued left zero), in its order,
// and the service's recorded shard count.
func lanesOf(ctx context.Context, rdb redis.UniversalClient, keys store.Keyspace, service string) ([]LaneStatus, int, error) {
	view, err := readServiceView(ctx, rdb, keys, service)
	if err != nil {
		return nil, 0, fmt.Errorf("rpr: read lanes of %s: %w", service, err)
	}
	byLane := map[string]*LaneStatus{DefaultLane: {Lane: DefaultLane, Routed: true}}
	for _, lane := range view.routes.Lanes() {
		byLane[lane] = &LaneStatus{Lane: lane, Routed: true}
	}
	status := func(lane string) *LaneStatus {
		if byLane[lane] == nil {
			byLane[lane] = &LaneStatus{Lane: lane}
		}
		return byLane[lane]
	}
	for lane, n := range view.live() {
		status(lane).LiveWorkers = n
	}
	held, err := lanesWithKeys(ctx, rdb, keys, service, view.shards)
	if err != nil {
		return nil, 0, err
	}
	for _, lane := range held {
		status(lane)
	}
	out := make([]LaneStatus, 0, len(byLane))
	for _, st := range byLane {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool {
		if (out[i].Lane == DefaultLane) != (out[j].Lane == DefaultLane) {
			return out[i].Lane == DefaultLane
		}
		return out[i].Lane < out[j].Lane
	})
	return out, view.shards, nil
}

// lanesWithKeys finds the lanes that have a request stream or retry set in
// some shard of service, by SCAN (on every master of a Cluster).
func lanesWithKeys(ctx context.Context, rdb redis.UniversalClient, keys store.Keyspace, service string, shards int) ([]string, error) {
	var patterns []string
	for _, sk := range shardsOf(keys, service, 0, shards) {
		patterns = append(patterns, sk.LanePatterns()...)
	}
	found := map[string]bool{}
	err := scanEveryMaster(ctx, rdb, patterns, func(key string) {
		if lane := key[strings.LastIndex(key, ":")+1:]; ValidateLane(lane) == nil {
			found[lane] = true
		}
	})
	if err != nil {
		return nil, fmt.Errorf("rpr: find the lanes of %s: %w", service, err)
	}
	return slices.Sorted(maps.Keys(found)), nil
}

// knownLanes lists the lanes of service Lanes reports, the default lane
// first, without counting their requests.
func knownLanes(ctx context.Context, rdb redis.UniversalClient, keys store.Keyspace, service string) ([]string, error) {
	statuses, _, err := lanesOf(ctx, rdb, keys, service)
	if err != nil {
		return nil, err
	}
	lanes := make([]string, len(statuses))
	for i, st := range statuses {
		lanes[i] = st.Lane
	}
	return lanes, nil
}

// serviceView is what operators' tools read first about a service, in one
// pipelined round trip: Redis's clock, the worker heartbeats, the routing
// table and the recorded shard count.
type serviceView struct {
	now    time.Time
	beats  map[string]string // the heartbeat hash
	routes wire.RouteTable   // the entries that decode
	shards int
}

// readServiceView reads the view of service. A routing table that does not
// read (a key of another type, say) only hides the lanes it names: it is
// no error.
func readServiceView(ctx context.Context, rdb redis.UniversalClient, keys store.Keyspace, service string) (serviceView, error) {
	pipe := rdb.Pipeline()
	now := pipe.Time(ctx)
	beats := pipe.HGetAll(ctx, keys.Workers(service))
	routes := pipe.HGetAll(ctx, keys.Routes(service))
	count := pipe.Get(ctx, keys.ShardCount(service))
	_, _ = pipe.Exec(ctx)
	if err := now.Err(); err != nil {
		return serviceView{}, fmt.Errorf("TIME: %w", err)
	}
	if err := beats.Err(); err != nil {
		return serviceView{}, fmt.Errorf("HGETALL %s: %w", keys.Workers(service), err)
	}
	if err := count.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return serviceView{}, fmt.Errorf("GET %s: %w", keys.ShardCount(service), err)
	}
	table, _ := wire.ParseRouteTable(service, routes.Val())
	return serviceView{now: now.Val(), beats: beats.Val(), routes: table, shards: parseShardCount(count.Result())}, nil
}

// live counts the live workers of each lane.
func (v serviceView) live() map[string]int {
	return wire.LiveByLane(v.beats, v.now.UnixMilli(), DefaultLane)
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
	keys := store.NewKeyspace(orDefaultPrefix(prefix))
	view, err := readServiceView(ctx, rdb, keys, service)
	if err != nil {
		return DrainResult{}, fmt.Errorf("rpr: drain lane %s of %s: %w", from, service, err)
	}
	orphaned := view.live()[from] == 0
	var res DrainResult
	for shard, sk := range shardsOf(keys, service, 0, view.shards) {
		for {
			call := store.NewMoveLane(sk, from, to, drainBatch, orphaned)
			store.Run(ctx, rdb, &call.Call)
			moved, movedRetries, left, err := call.Result()
			if err != nil {
				return res, fmt.Errorf("rpr: drain lane %s of %s (shard %d): %w", from, service, shard, err)
			}
			res.Moved += moved + movedRetries
			if moved+movedRetries < drainBatch {
				res.Left += left
				break
			}
		}
	}
	return res, nil
}
