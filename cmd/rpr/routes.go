package main

// rpr routes: read and change a service's routing table, the rules that
// send its calls to lanes, and move what a lane that lost its route still
// holds. The admin handle checks rules and patterns; these commands map its
// errors onto the arguments that caused them, with an example, and exit
// status 2, and take care of the lanes a change leaves behind: a lane
// nothing routes to any more keeps its queued requests until a server of
// it runs them or they are moved.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

// routeSettle is how long set and rm wait, after draining a lane that
// lost its route, before draining it once more: clients apply a change
// within a second (Pub/Sub, else their one-second reload), and an async
// request a client sent under the old table in the meantime would
// otherwise stay in a lane no server reads.
const routeSettle = 2 * time.Second

func newRoutesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "routes",
		Short: "List, set, test and remove a service's routes to lanes (gray release)",
		Long: `routes manages a service's routing table: the rules, in the hash
rpr:v1:{pkg.Svc}:routes, that send its calls to lanes. A lane is a queue of
its own, served by the servers started with ServerOptions.Lane set to its
name (the others serve the lane "default"), so a new version can take a
slice of the traffic, or only the calls a header marks, without a
redeploy. Every client applies a change within a second.

A route belongs to a method pattern, pkg.Svc/Method or pkg.Svc/* (every
method), and holds rules tried in order; the first that matches a call
wins. A call is routed by its method's rules, then by the service's /*
rules, else it goes to the default lane. Rules (one argument each):

  v2                          every call to lane v2
  v1:90,v2:10                 90% to v1, 10% to v2, at random by weight
  x-canary=true => v2         calls whose x-canary header is "true" to v2
  tenant=acme,x-beta=1 => v2:50,default:50
                              headers must all match; then by weight
  tenant="a,b" => v2          a value with ',' or '"' (or spaces at its ends)
                              in double quotes, as a Go string literal

A call a route sends to a lane with no live server fails at once with
UNAVAILABLE, not executed; an async request waits in the lane until a
server of it runs. When a change leaves a lane without a route, set and rm
say what becomes of the requests it still holds (see rpr routes set --help).`,
		Example: `  rpr routes ls examples.greeter.v1.Greeter
  rpr routes set examples.greeter.v1.Greeter/* 'x-canary=true => v2' 'v1:90,v2:10'
  rpr routes test examples.greeter.v1.Greeter/SayHello -H x-canary=true
  rpr routes rm examples.greeter.v1.Greeter/*
  rpr routes drain examples.greeter.v1.Greeter v2 --to default`,
	}
	return commandGroup(cmd, "ls, set, rm, test or drain",
		newRoutesLsCommand(), newRoutesSetCommand(), newRoutesRmCommand(), newRoutesTestCommand(), newRoutesDrainCommand())
}

// parsePattern checks a PATTERN argument (pkg.Svc/Method or pkg.Svc/*)
// and returns its service.
func parsePattern(arg string) (string, error) {
	svc, method, ok := strings.Cut(arg, "/")
	switch {
	case !ok:
		if checkServiceName(arg, "") == nil && arg != "" {
			return "", badInput(fmt.Errorf("pattern %q names no method: write %s/* for every method of the service, or %s/Method for one", arg, arg, arg))
		}
		return "", badInput(fmt.Errorf("pattern %q: want pkg.Svc/Method or pkg.Svc/*, e.g. examples.greeter.v1.Greeter/*", arg))
	case checkServiceName(svc, "") != nil || svc == "":
		return "", badInput(fmt.Errorf("pattern %q: %q is not a service name; want pkg.Svc/Method or pkg.Svc/*, e.g. examples.greeter.v1.Greeter/SayHello", arg, svc))
	case method == "":
		return "", badInput(fmt.Errorf("pattern %q names no method: write %s/* for every method, or %s/Method for one", arg, svc, svc))
	case method != "*" && strings.ContainsAny(method, "*/{} \t"):
		return "", badInput(fmt.Errorf("pattern %q: a method is an exact name (%s/SayHello) or * for all of them (%s/*); partial wildcards are not supported", arg, svc, svc))
	}
	return svc, nil
}

// parseRuleArgs reads the RULE arguments of set, saying which one is
// wrong and how to write it.
func parseRuleArgs(specs []string) ([]admin.RouteRule, error) {
	rules := make([]admin.RouteRule, 0, len(specs))
	for i, spec := range specs {
		rule, err := admin.ParseRouteRule(spec)
		if err != nil {
			msg := strings.TrimPrefix(err.Error(), "rpr: ")
			if !strings.Contains(spec, "=>") && strings.Contains(spec, "=") {
				msg += "; a header condition goes before =>, e.g. 'x-canary=true => v2'"
			}
			return nil, badInput(fmt.Errorf("rule %d: %s", i+1, msg))
		}
		rules = append(rules, rule)
	}
	return rules, nil
}

// unreachableRules names the rules that can never match because an
// earlier rule of the same route matches every call or the same calls.
func unreachableRules(rules []admin.RouteRule) []string {
	var out []string
	for i := range rules {
		for j := range i {
			if covers(rules[j], rules[i]) {
				out = append(out, fmt.Sprintf("rule %d (%s) is never reached: rule %d (%s) matches every call it would", i+1, rules[i], j+1, rules[j]))
				break
			}
		}
	}
	return out
}

// covers reports whether every call that matches b also matches a: a's
// header conditions are a subset of b's.
func covers(a, b admin.RouteRule) bool {
	for k, v := range a.Match {
		if w, ok := b.Match[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// parseHeaderFlags reads -H key=value flags (key:value is accepted too,
// as rpr call writes them).
func parseHeaderFlags(flags []string) (tunnel.Metadata, error) {
	md := tunnel.Metadata{}
	for _, h := range flags {
		key, value, ok := strings.Cut(h, "=")
		if !ok {
			key, value, ok = strings.Cut(h, ":")
		}
		key = strings.TrimSpace(key)
		if !ok || key == "" {
			return nil, badInput(fmt.Errorf("-H %q: want key=value, e.g. -H x-canary=true", h))
		}
		md.Add(key, strings.TrimSpace(value))
	}
	return md, nil
}

// routesTarget is a service's routing table and what the commands need
// around it.
type routesTarget struct {
	rdb     redis.UniversalClient // closed by the command
	a       *admin.Client
	svc     *admin.Service
	service string // svc's name
	table   *admin.Routes
}

// openRoutes connects to the --redis URL for the routes of service; the
// caller closes t.rdb.
func openRoutes(ctx context.Context, rf redisFlags, service string) (*routesTarget, error) {
	rdb, err := rf.open(ctx)
	if err != nil {
		return nil, err
	}
	a := rf.handle(rdb)
	svc := a.Service(service)
	return &routesTarget{rdb: rdb, a: a, svc: svc, service: service, table: svc.Routes()}, nil
}

// list reads the table; entries that do not decode are returned apart,
// as clients skip them.
func (t *routesTarget) list(ctx context.Context) (routes []admin.Route, invalid, err error) {
	routes, err = t.table.List(ctx)
	if err != nil && routes == nil {
		return nil, nil, badInput(err)
	}
	return routes, err, nil
}

// routeOf returns the route of pattern among routes.
func routeOf(routes []admin.Route, pattern string) (admin.Route, bool) {
	i := slices.IndexFunc(routes, func(r admin.Route) bool { return r.Pattern == pattern })
	if i < 0 {
		return admin.Route{}, false
	}
	return routes[i], true
}

// routedLanes returns the lanes routes send calls to (weight above 0),
// sorted; the default lane counts only when a rule names it.
func routedLanes(routes []admin.Route) []string {
	set := map[string]bool{}
	for _, r := range routes {
		for _, rule := range r.Rules {
			for _, lw := range rule.Lanes {
				if lw.Weight > 0 {
					set[lw.Lane] = true
				}
			}
		}
	}
	out := make([]string, 0, len(set))
	for l := range set {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

func laneStatus(statuses []admin.LaneStatus, lane string) (admin.LaneStatus, bool) {
	for _, st := range statuses {
		if st.Lane == lane {
			return st, true
		}
	}
	return admin.LaneStatus{Lane: lane}, false
}

// rulesText renders rules the way set takes them, quoted for a shell.
func rulesText(rules []admin.RouteRule) string {
	parts := make([]string, len(rules))
	for i, r := range rules {
		parts[i] = shellQuote(r.String())
	}
	return strings.Join(parts, " ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t'\"$`\\|&;<>()*?[]#~=!{}") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
