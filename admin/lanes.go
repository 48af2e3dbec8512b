package admin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// LaneStatus is what an operator needs to know about one lane of a
// service before routing traffic to it or away from it.
type LaneStatus struct {
	// Lane is the lane's name (tunnel.DefaultLane for the default one).
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

// Lanes returns the status of every lane of the service that some route
// names, some live server serves, that still holds requests in some shard,
// or that is the default, sorted by name with the default first. Finding
// the lanes that hold requests SCANs the keyspace (on every master of a
// Cluster); then one pipelined round trip reads the view and one counts
// the requests: an operator's call, not one for hot paths.
func (s *Service) Lanes(ctx context.Context) ([]LaneStatus, error) {
	out, shards, err := s.lanes(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(out))
	for i, st := range out {
		names[i] = st.Lane
	}
	queued, _, err := s.queueBacklog(ctx, s.keys.Shards(s.name, 0, shards), names)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Queued = queued[out[i].Lane]
	}
	return out, nil
}

// lanes returns the lanes Lanes reports (Queued left zero), in its order,
// and the service's recorded shard count.
func (s *Service) lanes(ctx context.Context) ([]LaneStatus, int, error) {
	view, err := s.view(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("rpr: read lanes of %s: %w", s.name, err)
	}
	byLane := map[string]*LaneStatus{tunnel.DefaultLane: {Lane: tunnel.DefaultLane, Routed: true}}
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
	held, err := s.lanesWithKeys(ctx, view.shards)
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
		if (out[i].Lane == tunnel.DefaultLane) != (out[j].Lane == tunnel.DefaultLane) {
			return out[i].Lane == tunnel.DefaultLane
		}
		return out[i].Lane < out[j].Lane
	})
	return out, view.shards, nil
}

// lanesWithKeys finds the lanes that have a request stream or retry set in
// some of the service's shards, by SCAN (on every master of a Cluster).
func (s *Service) lanesWithKeys(ctx context.Context, shards int) ([]string, error) {
	var patterns []string
	for _, sk := range s.keys.Shards(s.name, 0, shards) {
		patterns = append(patterns, sk.LanePatterns()...)
	}
	found := map[string]bool{}
	err := store.ScanEveryMaster(ctx, s.rdb, patterns, func(key string) {
		if lane := key[strings.LastIndex(key, ":")+1:]; wire.ValidateLane(lane) == nil {
			found[lane] = true
		}
	})
	if err != nil {
		return nil, fmt.Errorf("rpr: find the lanes of %s: %w", s.name, err)
	}
	return slices.Sorted(maps.Keys(found)), nil
}

// laneNames lists the lanes of the service Lanes reports, the default lane
// first, without counting their requests.
func (s *Service) laneNames(ctx context.Context) ([]string, error) {
	statuses, _, err := s.lanes(ctx)
	if err != nil {
		return nil, err
	}
	lanes := make([]string, len(statuses))
	for i, st := range statuses {
		lanes[i] = st.Lane
	}
	return lanes, nil
}

// DrainResult says what Service.Drain moved.
type DrainResult struct {
	// Moved counts requests moved to the target lane (from streams and
	// retry sets); Left counts those still in the lane, held by its live
	// servers, which finish them.
	Moved, Left int64
}

// drainBatch is how many entries one move-lane script run moves.
const drainBatch = 500

// Drain moves the requests queued in lane from of the service, in every
// shard, to lane to, so that they are served there instead of stranded:
// use it when a lane loses its route and its servers are gone (or about to
// go). Requests the lane's live servers are running stay theirs; when the
// lane has no live server, also those its dead servers had taken move, and
// the target lane's servers settle them like requests of a crashed worker
// (run again only when idempotent). Nothing is lost or duplicated: each
// request moves in one atomic step, in script runs of up to 500 entries,
// one round trip each.
func (s *Service) Drain(ctx context.Context, from, to string) (DrainResult, error) {
	if err := ValidateLane(from); err != nil {
		return DrainResult{}, err
	}
	if err := ValidateLane(to); err != nil {
		return DrainResult{}, err
	}
	if from == to {
		return DrainResult{}, fmt.Errorf("rpr: drain lane %s into itself: name another lane to move its requests to", from)
	}
	view, err := s.view(ctx)
	if err != nil {
		return DrainResult{}, fmt.Errorf("rpr: drain lane %s of %s: %w", from, s.name, err)
	}
	orphaned := view.live()[from] == 0
	var res DrainResult
	for shard, sk := range s.keys.Shards(s.name, 0, view.shards) {
		for {
			call := store.NewMoveLane(sk, from, to, drainBatch, orphaned)
			store.Run(ctx, s.rdb, &call.Call)
			moved, movedRetries, left, err := call.Result()
			if err != nil {
				return res, fmt.Errorf("rpr: drain lane %s of %s (shard %d): %w", from, s.name, shard, err)
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
