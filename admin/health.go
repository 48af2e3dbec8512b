package admin

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// WorkerStatus describes one worker of a service, as its heartbeats show it.
type WorkerStatus struct {
	// ID is the worker id (tunnel.ServerOptions.WorkerID).
	ID string
	// Host and PID say where it runs.
	Host string
	PID  int
	// Started is when its server was created.
	Started time.Time
	// LastBeat is its last heartbeat, on Redis's clock.
	LastBeat time.Time
	// Live is true when the last beat is recent enough for clients to
	// send it calls (within the last 5s).
	Live bool
	// Lane is the lane it serves (tunnel.DefaultLane unless
	// tunnel.ServerOptions.Lane names another).
	Lane string
	// Shards lists the shards of a sharded service it reads; nil when it
	// reads shard 0 alone (the service is not sharded).
	Shards []int
	// Methods lists the methods it serves, sorted; nil for a worker of a
	// release that does not say (it is taken to serve them all).
	Methods []string
	// Schema is the version of the service's schema it was built with
	// (the key of Service.SchemaVersion); "" when it does not say.
	Schema string
}

// Health is what Redis knows about a service's servers.
type Health struct {
	// Service is the fully qualified service name.
	Service string
	// Workers lists the workers heard from recently (in the last minute),
	// live ones first, then by ID.
	Workers []WorkerStatus
}

// Serving reports whether at least one live worker serves the service,
// in any lane; this is what a readiness probe wants.
func (h Health) Serving() bool {
	return len(h.Workers) > 0 && h.Workers[0].Live
}

// ServingLane reports whether at least one live worker serves lane ("" is
// the default lane): calls routed to a lane without one fail UNAVAILABLE.
func (h Health) ServingLane(lane string) bool {
	lane = store.LaneOrDefault(lane)
	for _, w := range h.Workers {
		if w.Live && w.Lane == lane {
			return true
		}
	}
	return false
}

// Health reads the heartbeats of the service's workers from shard 0's
// hash, where every server beats whatever shards it reads: one pipelined
// round trip (TIME and HGETALL). It fails only when Redis cannot be read;
// a service with no live worker is a Health whose Serving is false.
func (s *Service) Health(ctx context.Context) (Health, error) {
	pipe := s.rdb.Pipeline()
	now := pipe.Time(ctx)
	beats := pipe.HGetAll(ctx, s.keys.Workers(s.name))
	if _, err := pipe.Exec(ctx); err != nil {
		return Health{}, fmt.Errorf("rpr: read heartbeats of %s: %w", s.name, err)
	}
	redisNow := now.Val().UnixMilli()
	h := Health{Service: s.name}
	for id, raw := range beats.Val() {
		w, ok := wire.ParseWorker(raw)
		if !ok {
			continue
		}
		h.Workers = append(h.Workers, WorkerStatus{
			ID:       id,
			Host:     w.Host,
			PID:      w.PID,
			Started:  time.UnixMilli(w.Started),
			LastBeat: time.UnixMilli(w.BeatMs),
			Live:     w.LiveAt(redisNow),
			Lane:     store.LaneOrDefault(w.Lane),
			Shards:   w.Shards,
			Methods:  w.Methods,
			Schema:   w.Schema,
		})
	}
	sort.Slice(h.Workers, func(i, j int) bool {
		a, b := h.Workers[i], h.Workers[j]
		if a.Live != b.Live {
			return a.Live
		}
		return a.ID < b.ID
	})
	return h, nil
}
