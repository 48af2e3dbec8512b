package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// Service is the handle of one service of a deployment (Client.Service).
// It holds only the service's name and its Client's connection and
// prefix: every method reads Redis afresh.
type Service struct {
	rdb  redis.UniversalClient
	keys store.Keyspace
	name string
}

// Name returns the service's full name.
func (s *Service) Name() string { return s.name }

// DeadLetters returns the service's dead-letter queue.
func (s *Service) DeadLetters() *DeadLetters { return &DeadLetters{svc: s} }

// Routes returns the service's routing table.
func (s *Service) Routes() *Routes { return &Routes{svc: s} }

// Limits returns the service's rate-limit rules.
func (s *Service) Limits() *Limits { return &Limits{svc: s} }

// serviceView is what most operations read first about a service, in one
// pipelined round trip: Redis's clock, the worker heartbeats, the routing
// table and the recorded shard count.
type serviceView struct {
	now    time.Time
	beats  map[string]string // the heartbeat hash
	routes wire.RouteTable   // the entries that decode
	shards int
}

// view reads the service's view. A routing table that does not read (a
// key of another type, say) only hides the lanes it names: it is no error.
func (s *Service) view(ctx context.Context) (serviceView, error) {
	pipe := s.rdb.Pipeline()
	now := pipe.Time(ctx)
	beats := pipe.HGetAll(ctx, s.keys.Workers(s.name))
	routes := pipe.HGetAll(ctx, s.keys.Routes(s.name))
	count := pipe.Get(ctx, s.keys.ShardCount(s.name))
	_, _ = pipe.Exec(ctx)
	if err := now.Err(); err != nil {
		return serviceView{}, fmt.Errorf("TIME: %w", err)
	}
	if err := beats.Err(); err != nil {
		return serviceView{}, fmt.Errorf("HGETALL %s: %w", s.keys.Workers(s.name), err)
	}
	if err := count.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return serviceView{}, fmt.Errorf("GET %s: %w", s.keys.ShardCount(s.name), err)
	}
	table, _ := wire.ParseRouteTable(s.name, routes.Val())
	return serviceView{now: now.Val(), beats: beats.Val(), routes: table, shards: store.ParseShardCount(count.Result())}, nil
}

// live counts the live workers of each lane.
func (v serviceView) live() map[string]int {
	return wire.LiveByLane(v.beats, v.now.UnixMilli(), tunnel.DefaultLane)
}

// deadLetterCap returns the smallest dead-letter cap the live workers
// announce (wire.Worker.MaxDeadLetters); 0 when none does.
func (v serviceView) deadLetterCap() int64 {
	var out int64
	for _, raw := range v.beats {
		w, ok := wire.ParseWorker(raw)
		if !ok || w.MaxDeadLetters <= 0 || v.now.UnixMilli()-w.BeatMs > wire.LiveWindow.Milliseconds() {
			continue
		}
		if out == 0 || w.MaxDeadLetters < out {
			out = w.MaxDeadLetters
		}
	}
	return out
}

// knownLanes returns the lanes to look at without scanning the keyspace:
// the default lane, the lanes named (by routes, or by the caller), and
// those of every worker in the heartbeat hash beats (silent ones too: a
// lane whose servers just died is the one whose backlog an operator needs
// to see). The default lane comes first, then the others by name; names
// that are no lane are left out.
func knownLanes(named []string, beats map[string]string) []string {
	set := map[string]bool{}
	for _, lane := range named {
		if wire.ValidateLane(lane) == nil {
			set[lane] = true
		}
	}
	for _, raw := range beats {
		if w, ok := wire.ParseWorker(raw); ok {
			set[store.LaneOrDefault(w.Lane)] = true
		}
	}
	delete(set, tunnel.DefaultLane)
	lanes := []string{tunnel.DefaultLane}
	for lane := range set {
		lanes = append(lanes, lane)
	}
	slices.Sort(lanes[1:])
	return lanes
}

// absentStreamOrGroup reports whether err is Redis saying the stream or the
// consumer group does not exist ("ERR no such key", "NOGROUP ...").
func absentStreamOrGroup(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "NOGROUP") || strings.Contains(msg, "no such key")
}

// streamIDMillis returns the millisecond part of a stream entry id
// ("1764434400123-0"), which for ids Redis generated is when the entry was
// added, on Redis's clock.
func streamIDMillis(id string) (int64, bool) {
	ms, _, _ := strings.Cut(id, "-")
	v, err := strconv.ParseInt(ms, 10, 64)
	return v, err == nil
}

// unixMillis is the time of unix ms, or the zero time when ms is not
// positive (unset).
func unixMillis(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
