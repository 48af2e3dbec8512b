package tunnel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// A service's routing table sends calls to lanes: each lane is its own
// request queue, served by the servers that joined it (ServerOptions.Lane),
// so a new version can take a slice of the traffic, or only the calls a
// header marks, without a redeploy.
//
// The table lives in the hash rpr:v1:{S}:routes, one field per method
// pattern ("pkg.Svc/Method", or "pkg.Svc/*" for every method), each holding
// an ordered list of rules. A call is routed by the rules of its exact
// method pattern, then by those of the service wildcard; within a pattern
// the first rule that matches wins; when none does, the call goes to the
// default lane. A rule matches when each of its headers has the given value
// (a rule without headers always matches), and it then picks one of its
// lanes at random by weight.
//
// Clients keep the table in memory: a change is announced on Pub/Sub
// (RouteTable.Set and Remove do that) and every client also reloads the
// table every second, so a change applies within a second, without a
// restart, even if the announcement is lost.

// Route-rule shapes, until the operator API that sets routes moves to its
// own package: the rules are wire.RouteRule.
type (
	RouteRule  = wire.RouteRule
	LaneWeight = wire.LaneWeight
)

// ValidateLane checks a lane name (see wire.ValidateLane).
func ValidateLane(lane string) error { return wire.ValidateLane(lane) }

// Route is the rules of one method pattern.
type Route struct {
	// Pattern is "pkg.Svc/Method" or "pkg.Svc/*".
	Pattern string
	// Rules are tried in order; the first match wins.
	Rules []RouteRule
}

// ParseRouteRule reads a rule in the form the CLI and RouteRule.String
// use:
//
//	v2                          every call to lane v2
//	v1:90,v2:10                 90% to v1, 10% to v2
//	x-canary=true => v2         calls whose x-canary header is "true" to v2
//	tenant=acme,x-beta=1 => v2:50,default:50
func ParseRouteRule(spec string) (RouteRule, error) {
	var rule RouteRule
	match, lanes, hasMatch := strings.Cut(spec, "=>")
	if !hasMatch {
		lanes, match = match, ""
	}
	if hasMatch {
		rule.Match = map[string]string{}
		for _, cond := range strings.Split(match, ",") {
			key, value, ok := strings.Cut(strings.TrimSpace(cond), "=")
			key = strings.ToLower(strings.TrimSpace(key))
			if !ok || key == "" {
				return RouteRule{}, fmt.Errorf("route rule %q: header condition %q is not key=value (e.g. x-canary=true => v2)", spec, strings.TrimSpace(cond))
			}
			rule.Match[key] = strings.TrimSpace(value)
		}
	}
	if !hasMatch && strings.Contains(lanes, "=") {
		return RouteRule{}, fmt.Errorf("route rule %q: a header match needs \"=> lane\" after it (e.g. %q)", spec, strings.TrimSpace(lanes)+" => v2")
	}
	for _, part := range strings.Split(lanes, ",") {
		part = strings.TrimSpace(part)
		lane, weightText, weighted := strings.Cut(part, ":")
		weight := 1
		if weighted {
			w, err := strconv.Atoi(strings.TrimSpace(weightText))
			if err != nil || w < 0 {
				return RouteRule{}, fmt.Errorf("route rule %q: weight of lane %q must be a whole number ≥ 0 (e.g. v1:90,v2:10)", spec, lane)
			}
			weight = w
		}
		rule.Lanes = append(rule.Lanes, LaneWeight{Lane: strings.TrimSpace(lane), Weight: weight})
	}
	if err := rule.Validate(); err != nil {
		return RouteRule{}, fmt.Errorf("route rule %q: %w", spec, err)
	}
	return rule, nil
}

// clientRoutes is what a client holds of a service's routing table.
type clientRoutes struct {
	table atomic.Pointer[wire.RouteTable]
	raw   atomic.Pointer[map[string]string] // the hash last read, to skip reparsing
}

// observe records the routes hash as last read; it returns the errors of
// the entries that did not decode, the first time it sees them.
func (r *clientRoutes) observe(service string, hash map[string]string) []error {
	if last := r.raw.Load(); last != nil && maps.Equal(*last, hash) {
		return nil
	}
	table, errs := wire.ParseRouteTable(service, hash)
	r.table.Store(&table)
	r.raw.Store(&hash)
	return errs
}

// lane returns the lane of a call to method with header.
func (r *clientRoutes) lane(service, method string, header Metadata) string {
	t := r.table.Load()
	if t == nil || len(*t) == 0 {
		return DefaultLane
	}
	if _, _, rule := t.Resolve(service, method, header); rule != nil {
		return rule.Pick(rand.Float64())
	}
	return DefaultLane
}

// lanes returns the lanes the table names.
func (r *clientRoutes) lanes() []string {
	if t := r.table.Load(); t != nil {
		return t.Lanes()
	}
	return nil
}

// RouteTable reads and changes a service's routing table; it is what
// `rpr routes` uses. Changes apply to every client within a second.
type RouteTable struct {
	rdb     redis.UniversalClient
	keys    store.Keyspace
	service string
}

// NewRouteTable returns the routing table of service under prefix ("" for
// DefaultPrefix).
func NewRouteTable(rdb redis.UniversalClient, prefix, service string) *RouteTable {
	return &RouteTable{rdb: rdb, keys: store.NewKeyspace(orDefaultPrefix(prefix)), service: service}
}

// List returns the routes, sorted by pattern, exact methods before the
// wildcard. Entries that do not decode are reported in the error, after
// the routes that do.
func (t *RouteTable) List(ctx context.Context) ([]Route, error) {
	hash, err := t.rdb.HGetAll(ctx, t.keys.Routes(t.service)).Result()
	if err != nil {
		return nil, fmt.Errorf("rpr: read routes of %s: %w", t.service, err)
	}
	table, errs := wire.ParseRouteTable(t.service, hash)
	routes := make([]Route, 0, len(table))
	for pattern, rules := range table {
		routes = append(routes, Route{Pattern: pattern, Rules: rules})
	}
	sort.Slice(routes, func(i, j int) bool {
		wi, wj := strings.HasSuffix(routes[i].Pattern, "/*"), strings.HasSuffix(routes[j].Pattern, "/*")
		if wi != wj {
			return wj
		}
		return routes[i].Pattern < routes[j].Pattern
	})
	return routes, errors.Join(errs...)
}

// Set replaces the rules of pattern ("pkg.Svc/Method" or "pkg.Svc/*") and
// tells every client. It validates everything first and changes nothing
// when something is wrong.
func (t *RouteTable) Set(ctx context.Context, pattern string, rules []RouteRule) error {
	if err := wire.ValidatePattern(t.service, pattern); err != nil {
		return err
	}
	if len(rules) == 0 {
		return fmt.Errorf("route %s: no rules (to remove the route, use Remove / `rpr routes rm`)", pattern)
	}
	rules = slices.Clone(rules) // the caller's rules stay as they were
	for i := range rules {
		match := make(map[string]string, len(rules[i].Match))
		for k, v := range rules[i].Match { // header keys are case-insensitive
			match[strings.ToLower(k)] = v
		}
		if len(match) > 0 {
			rules[i].Match = match
		}
		if err := rules[i].Validate(); err != nil {
			return fmt.Errorf("route %s, rule %d: %w", pattern, i+1, err)
		}
	}
	raw, err := json.Marshal(rules)
	if err != nil {
		return fmt.Errorf("rpr: encode route %s: %w", pattern, err)
	}
	if err := t.rdb.HSet(ctx, t.keys.Routes(t.service), pattern, raw).Err(); err != nil {
		return fmt.Errorf("rpr: write route %s: %w", pattern, err)
	}
	t.announce(ctx)
	return nil
}

// Remove deletes the route of pattern; false when there was none.
func (t *RouteTable) Remove(ctx context.Context, pattern string) (bool, error) {
	n, err := t.rdb.HDel(ctx, t.keys.Routes(t.service), pattern).Result()
	if err != nil {
		return false, fmt.Errorf("rpr: remove route %s: %w", pattern, err)
	}
	if n > 0 {
		t.announce(ctx)
	}
	return n > 0, nil
}

// announce tells clients to reload the table now; if the message is lost,
// their periodic reload still picks the change up within a second.
func (t *RouteTable) announce(ctx context.Context) {
	_ = t.rdb.Publish(ctx, t.keys.RoutesChanged(t.service), "changed").Err()
}

// RouteDecision is where a call would go (see RouteTable.Test).
type RouteDecision struct {
	// Pattern and Rule are the route and rule that matched; Rule is nil
	// when none did and the call goes to the default lane.
	Pattern string
	Rule    *RouteRule
	// RuleNumber is Rule's place in its route's list, from 1 (0 when no
	// rule matched).
	RuleNumber int
	// Lanes are the lanes the call may go to, with their chances (0-1).
	Lanes map[string]float64
}

// Test says where a call to method ("Method" or "pkg.Svc/Method") with
// header would go under the current table.
func (t *RouteTable) Test(ctx context.Context, method string, header Metadata) (RouteDecision, error) {
	method = strings.TrimPrefix(method, t.service+"/")
	if method == "" || strings.ContainsAny(method, "/*") {
		return RouteDecision{}, fmt.Errorf("method %q: want a method name of %s, e.g. %s/SayHello", method, t.service, t.service)
	}
	hash, err := t.rdb.HGetAll(ctx, t.keys.Routes(t.service)).Result()
	if err != nil {
		return RouteDecision{}, fmt.Errorf("rpr: read routes of %s: %w", t.service, err)
	}
	table, _ := wire.ParseRouteTable(t.service, hash)
	lower := Metadata{}
	for k, v := range header {
		lower[strings.ToLower(k)] = v
	}
	pattern, index, rule := table.Resolve(t.service, method, lower)
	d := RouteDecision{Pattern: pattern, Rule: rule, RuleNumber: index + 1, Lanes: map[string]float64{}}
	if rule == nil {
		d.Lanes[DefaultLane] = 1
		return d, nil
	}
	total := rule.TotalWeight()
	for _, lw := range rule.Lanes {
		if lw.Weight > 0 {
			d.Lanes[lw.Lane] = float64(lw.Weight) / float64(total)
		}
	}
	return d, nil
}

// routeWatcher hands the announcements of routing-table changes (see
// RouteTable.Set) to the watchers of the services a client calls, over
// one Pub/Sub connection per client.
type routeWatcher struct {
	ctx context.Context // ends when the client closes
	rdb redis.UniversalClient
	wg  *sync.WaitGroup // the client's

	mu    sync.Mutex
	sub   *redis.PubSub
	kicks map[string]chan struct{} // channel -> the service watcher's kick
}

// watch subscribes to channel and kicks kick on each announcement.
func (w *routeWatcher) watch(channel string, kick chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() != nil {
		return
	}
	if w.kicks == nil {
		w.kicks = map[string]chan struct{}{}
	}
	w.kicks[channel] = kick
	if w.sub != nil {
		_ = w.sub.Subscribe(w.ctx, channel) // if lost, the periodic reload still applies changes
		return
	}
	w.sub = w.rdb.Subscribe(w.ctx, channel)
	msgs := w.sub.Channel()
	w.wg.Go(func() {
		for msg := range msgs {
			w.mu.Lock()
			kick := w.kicks[msg.Channel]
			w.mu.Unlock()
			select {
			case kick <- struct{}{}:
			default: // a refresh is already due
			}
		}
	})
}

// close ends the subscription and its goroutine.
func (w *routeWatcher) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sub != nil {
		_ = w.sub.Close()
	}
}
