package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// Routes reads and changes one service's routing table; it is what `rpr
// routes` uses. The table sends a method pattern ("pkg.Svc/Method", or
// "pkg.Svc/*" for every method) to lanes: each lane is its own request
// queue, served by the servers that joined it (tunnel.ServerOptions.Lane),
// so a new version can take a slice of the traffic, or only the calls a
// header marks, without a redeploy. A call is routed by the rules of its
// exact method's route, then by those of the service wildcard's; within a
// route the first rule that matches wins; when none does, the call goes to
// the default lane. Set and Remove announce the change on Pub/Sub, and
// every client also reloads the table every second, so a change applies
// within a second, without restarts.
type Routes struct {
	svc *Service
}

// Route is the rules of one method pattern.
type Route struct {
	// Pattern is "pkg.Svc/Method" or "pkg.Svc/*".
	Pattern string
	// Rules are tried in order; the first match wins.
	Rules []RouteRule
}

// RouteRule is one rule of a route: which calls it matches and the lanes
// it sends them to. Its JSON form is the one stored in the routes hash.
type RouteRule struct {
	// Match lists the request headers the rule requires, by lower-case
	// key; a call matches when, for each, one of the header's values is
	// the given one. Empty matches every call.
	Match map[string]string `json:"match,omitempty"`
	// Lanes are where matching calls go, chosen at random in proportion to
	// the weights. One lane with any weight takes them all.
	Lanes []LaneWeight `json:"lanes"`
}

// LaneWeight is one lane of a rule and its share of the rule's calls.
type LaneWeight struct {
	Lane   string `json:"lane"`
	Weight int    `json:"weight"`
}

// wireRule is r in the protocol's form.
func (r RouteRule) wireRule() wire.RouteRule {
	out := wire.RouteRule{Match: r.Match}
	for _, lw := range r.Lanes {
		out.Lanes = append(out.Lanes, wire.LaneWeight{Lane: lw.Lane, Weight: lw.Weight})
	}
	return out
}

// routeRuleOf is the protocol's rule r in this package's form.
func routeRuleOf(r wire.RouteRule) RouteRule {
	out := RouteRule{Match: r.Match}
	for _, lw := range r.Lanes {
		out.Lanes = append(out.Lanes, LaneWeight{Lane: lw.Lane, Weight: lw.Weight})
	}
	return out
}

// String returns the rule in the form ParseRouteRule reads and the CLI
// prints, e.g. "x-canary=true => v1:90,v2:10".
func (r RouteRule) String() string { return r.wireRule().String() }

// Validate checks the rule's lanes (ValidateLane), its weights (none
// negative, not all 0, no lane twice) and its header keys (lower-case).
func (r RouteRule) Validate() error { return r.wireRule().Validate() }

// ValidateLane checks a lane name: 1-32 characters of a-z, 0-9, '.', '_'
// and '-', starting with a letter or digit, as lanes appear in key names.
// "default" is the default lane (tunnel.DefaultLane).
func ValidateLane(lane string) error { return wire.ValidateLane(lane) }

// ParseRouteRule reads a rule in the form the CLI and RouteRule.String
// use:
//
//	v2                          every call to lane v2
//	v1:90,v2:10                 90% to v1, 10% to v2
//	x-canary=true => v2         calls whose x-canary header is "true" to v2
//	tenant=acme,x-beta=1 => v2:50,default:50
//	tenant="a,b" => v2          a value holding ',' or '"', or spaces at its ends, quoted
func ParseRouteRule(spec string) (RouteRule, error) {
	r, err := wire.ParseRouteRule(spec)
	if err != nil {
		return RouteRule{}, err
	}
	return routeRuleOf(r), nil
}

// Key returns the name of the routes hash, for messages and redis-cli.
func (t *Routes) Key() string { return t.svc.keys.Routes(t.svc.name) }

// table reads and decodes the routes hash (one HGETALL).
func (t *Routes) table(ctx context.Context) (wire.RouteTable, []error, error) {
	hash, err := t.svc.rdb.HGetAll(ctx, t.Key()).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("rpr: read routes of %s: %w", t.svc.name, err)
	}
	table, errs := wire.ParseRouteTable(t.svc.name, hash)
	return table, errs, nil
}

// List returns the routes, sorted by pattern, exact methods before the
// wildcard (one HGETALL). Entries that do not decode are reported in the
// error, one line each, after the routes that do.
func (t *Routes) List(ctx context.Context) ([]Route, error) {
	table, errs, err := t.table(ctx)
	if err != nil {
		return nil, err
	}
	routes := make([]Route, 0, len(table))
	for pattern, rules := range table {
		r := Route{Pattern: pattern}
		for _, rule := range rules {
			r.Rules = append(r.Rules, routeRuleOf(rule))
		}
		routes = append(routes, r)
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
// tells every client (HSET, then PUBLISH). It validates everything first
// and changes nothing when something is wrong; header keys are taken
// case-insensitively. The caller's rules are not modified.
func (t *Routes) Set(ctx context.Context, pattern string, rules []RouteRule) error {
	if err := wire.ValidatePattern(t.svc.name, pattern); err != nil {
		return err
	}
	if len(rules) == 0 {
		return fmt.Errorf("route %s: no rules (to remove the route, use Remove / `rpr routes rm`)", pattern)
	}
	stored := make([]wire.RouteRule, len(rules))
	for i, rule := range rules {
		w := rule.wireRule()
		match := make(map[string]string, len(w.Match))
		for k, v := range w.Match { // header keys are case-insensitive
			match[strings.ToLower(k)] = v
		}
		w.Match = nil
		if len(match) > 0 {
			w.Match = match
		}
		if err := w.Validate(); err != nil {
			return fmt.Errorf("route %s, rule %d: %w", pattern, i+1, err)
		}
		stored[i] = w
	}
	raw, err := json.Marshal(stored)
	if err != nil {
		return fmt.Errorf("rpr: encode route %s: %w", pattern, err)
	}
	if err := t.svc.rdb.HSet(ctx, t.Key(), pattern, raw).Err(); err != nil {
		return fmt.Errorf("rpr: write route %s: %w", pattern, err)
	}
	t.announce(ctx)
	return nil
}

// Remove deletes the route of pattern and tells every client; false when
// there was none.
func (t *Routes) Remove(ctx context.Context, pattern string) (bool, error) {
	n, err := t.svc.rdb.HDel(ctx, t.Key(), pattern).Result()
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
func (t *Routes) announce(ctx context.Context) {
	_ = t.svc.rdb.Publish(ctx, t.svc.keys.RoutesChanged(t.svc.name), "changed").Err()
}

// RouteDecision is where a call would go (see Routes.Test).
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
// header would go under the current table, as a client decides it (one
// HGETALL).
func (t *Routes) Test(ctx context.Context, method string, header tunnel.Metadata) (RouteDecision, error) {
	service := t.svc.name
	method = strings.TrimPrefix(method, service+"/")
	if method == "" || strings.ContainsAny(method, "/*") {
		return RouteDecision{}, fmt.Errorf("method %q: want a method name of %s, e.g. %s/SayHello", method, service, service)
	}
	table, _, err := t.table(ctx)
	if err != nil {
		return RouteDecision{}, err
	}
	lower := wire.Metadata{}
	for k, v := range header {
		lower[strings.ToLower(k)] = v
	}
	pattern, index, rule := table.Resolve(service, method, lower)
	d := RouteDecision{Pattern: pattern, RuleNumber: index + 1, Lanes: map[string]float64{}}
	if rule == nil {
		d.Lanes[tunnel.DefaultLane] = 1
		return d, nil
	}
	public := routeRuleOf(*rule)
	d.Rule = &public
	total := rule.TotalWeight()
	for _, lw := range rule.Lanes {
		if lw.Weight > 0 {
			d.Lanes[lw.Lane] = float64(lw.Weight) / float64(total)
		}
	}
	return d, nil
}
