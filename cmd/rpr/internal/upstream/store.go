package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
)

// The forwarding services whose tables this package keeps.
const (
	HTTPService = "rpr.tunnel.v1.HTTP"
	GRPCService = "rpr.tunnel.v1.GRPC"
)

// Service returns the forwarding service of a table of kind.
func (k Kind) Service() string {
	if k == GRPC {
		return GRPCService
	}
	return HTTPService
}

func (k Kind) String() string {
	if k == GRPC {
		return "gRPC"
	}
	return "HTTP"
}

// Store reads and changes one forwarding service's upstream table in
// Redis: a hash of route name -> JSON route, a version counter bumped with
// every change in the same transaction, and the version each egress and
// ingress last reported it forwards by.
type Store struct {
	rdb  redis.UniversalClient
	kind Kind
	keys store.Keyspace
}

// NewStore returns the store of the table of kind under key prefix ("":
// the default).
func NewStore(rdb redis.UniversalClient, prefix string, kind Kind) *Store {
	return &Store{rdb: rdb, kind: kind, keys: store.NewKeyspace(prefix)}
}

// Kind returns the kind of the table.
func (s *Store) Kind() Kind { return s.kind }

func (s *Store) table() string   { return s.keys.Upstreams(s.kind.Service()) }
func (s *Store) version() string { return s.keys.UpstreamsVersion(s.kind.Service()) }
func (s *Store) applied() string { return s.keys.UpstreamsApplied(s.kind.Service()) }

// Load reads the table and its version in one transaction. Entries that
// do not parse or check are in the table's Invalid, not an error.
func (s *Store) Load(ctx context.Context) (*Table, error) {
	var raw *redis.MapStringStringCmd
	var version *redis.StringCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		raw = p.HGetAll(ctx, s.table())
		version = p.Get(ctx, s.version())
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read the %s upstream table %s: %w", s.kind, s.table(), err)
	}
	v, _ := strconv.ParseInt(version.Val(), 10, 64)
	var routes []Route
	invalid := map[string]error{}
	for name, js := range raw.Val() {
		r, err := decodeRoute(name, js)
		if err != nil {
			invalid[name] = err
			continue
		}
		routes = append(routes, r)
	}
	t := NewTable(s.kind, v, routes)
	for name, err := range invalid {
		t.Invalid[name] = err
	}
	return t, nil
}

// decodeRoute reads the entry name of a table, its JSON raw, as Set
// stores it; NewTable checks it.
func decodeRoute(name, raw string) (Route, error) {
	r := Route{}
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return Route{}, fmt.Errorf("route %s: not a JSON route: %v (set it again with rpr upstreams set)", name, err)
	}
	r.Name = name
	return r, nil
}

// Version returns the table's current version (0 before any change).
func (s *Store) Version(ctx context.Context) (int64, error) {
	v, err := s.rdb.Get(ctx, s.version()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", s.version(), err)
	}
	return v, nil
}

// Set checks r and adds or replaces it, returning the table's new
// version.
func (s *Store) Set(ctx context.Context, r Route) (int64, error) {
	if err := r.Check(s.kind); err != nil {
		return 0, err
	}
	js, err := json.Marshal(r)
	if err != nil {
		return 0, fmt.Errorf("route %s: %w", r.Name, err)
	}
	var version *redis.IntCmd
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.table(), r.Name, js)
		version = p.Incr(ctx, s.version())
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("set route %s in %s: %w", r.Name, s.table(), err)
	}
	return version.Val(), nil
}

// Remove deletes route name, returning the table's new version and
// whether the route existed.
func (s *Store) Remove(ctx context.Context, name string) (int64, bool, error) {
	var removed, version *redis.IntCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		removed = p.HDel(ctx, s.table(), name)
		version = p.Incr(ctx, s.version())
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("remove route %s from %s: %w", name, s.table(), err)
	}
	return version.Val(), removed.Val() == 1, nil
}

// appliedTTL is how long the applied hash outlives its last renewal.
const appliedTTL = time.Minute

// reportEvery is how often a Watcher renews its applied report.
const reportEvery = 10 * time.Second

// IngressStale is how old an ingress's report may be for the ingress to
// count as running: three missed renewals mean it stopped without saying
// so (a clean stop withdraws the report at once).
const IngressStale = 3 * reportEvery

// IngressIDPrefix starts the id every ingress reports under; egresses
// report under their worker id.
const IngressIDPrefix = "ingress/"

// Report is what one forwarding process last said it decides by.
type Report struct {
	Version  int64     `json:"version"`
	Reported time.Time `json:"reported"`
}

// IsIngress reports whether id is an ingress's.
func IsIngress(id string) bool { return strings.HasPrefix(id, IngressIDPrefix) }

// ReportApplied records that the process id forwards by version of the
// table, now.
func (s *Store) ReportApplied(ctx context.Context, id string, version int64) error {
	pipe := s.rdb.Pipeline()
	pipe.HSet(ctx, s.applied(), id, fmt.Sprintf("%d %d", version, time.Now().UnixMilli()))
	pipe.PExpire(ctx, s.applied(), appliedTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("report the applied upstream table: %w", err)
	}
	return nil
}

// Withdraw removes the process id's report: it no longer forwards.
func (s *Store) Withdraw(ctx context.Context, id string) error {
	if err := s.rdb.HDel(ctx, s.applied(), id).Err(); err != nil {
		return fmt.Errorf("withdraw the applied upstream table report of %s: %w", id, err)
	}
	return nil
}

// Applied returns what each forwarding process last reported.
func (s *Store) Applied(ctx context.Context) (map[string]Report, error) {
	raw, err := s.rdb.HGetAll(ctx, s.applied()).Result()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.applied(), err)
	}
	out := make(map[string]Report, len(raw))
	for id, v := range raw {
		version, at, _ := strings.Cut(v, " ")
		var r Report
		r.Version, _ = strconv.ParseInt(version, 10, 64)
		if ms, err := strconv.ParseInt(at, 10, 64); err == nil {
			r.Reported = time.UnixMilli(ms)
		}
		out[id] = r
	}
	return out, nil
}

// LiveIngresses returns, sorted, the ids of the ingresses in applied whose
// last report is younger than IngressStale.
func LiveIngresses(applied map[string]Report, now time.Time) []string {
	var live []string
	for id, r := range applied {
		if IsIngress(id) && now.Sub(r.Reported) < IngressStale {
			live = append(live, id)
		}
	}
	slices.Sort(live)
	return live
}

// WaitApplied waits, while ctx allows, until every one of workers has
// reported version or a later one, polling every interval. It returns the
// workers still behind when ctx ended (none: all caught up).
func (s *Store) WaitApplied(ctx context.Context, version int64, workers []string, interval time.Duration) ([]string, error) {
	for {
		applied, err := s.Applied(ctx)
		if err != nil {
			return workers, err
		}
		var behind []string
		for _, w := range workers {
			if applied[w].Version < version {
				behind = append(behind, w)
			}
		}
		if len(behind) == 0 {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return behind, nil
		case <-time.After(interval):
		}
	}
}
