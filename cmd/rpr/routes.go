package main

// rpr routes: read and change a service's routing table, the rules that
// send its calls to lanes (see tunnel/routes.go), and move what a lane
// that lost its route still holds (tunnel.DrainLane). The library checks
// rules and patterns; this file maps its errors onto the arguments that
// caused them, with an example, and exit status 2, and takes care of the
// lanes a change leaves behind: a lane nothing routes to any more keeps
// its queued requests until a server of it runs them or they are moved.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

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

// ---- arguments ----

// checkServiceName refuses a SERVICE argument that cannot be a service
// name; example is a command line to show instead.
func checkServiceName(arg, example string) error {
	switch {
	case arg == "":
		return exitError{code: 2, cause: fmt.Errorf("name the service, e.g. %s", example)}
	case strings.Contains(arg, "/"):
		svc, _, _ := strings.Cut(arg, "/")
		return exitError{code: 2, cause: fmt.Errorf("%q names a method; this command takes the service: %s", arg, svc)}
	case strings.ContainsAny(arg, "{}*# \t:") || strings.HasPrefix(arg, ".") || strings.HasSuffix(arg, "."):
		return exitError{code: 2, cause: fmt.Errorf("%q is not a service name; write pkg.Service, e.g. examples.greeter.v1.Greeter", arg)}
	}
	return nil
}

// parsePattern checks a PATTERN argument (pkg.Svc/Method or pkg.Svc/*)
// and returns its service.
func parsePattern(arg string) (string, error) {
	svc, method, ok := strings.Cut(arg, "/")
	switch {
	case !ok:
		if checkServiceName(arg, "") == nil && arg != "" {
			return "", exitError{code: 2, cause: fmt.Errorf("pattern %q names no method: write %s/* for every method of the service, or %s/Method for one", arg, arg, arg)}
		}
		return "", exitError{code: 2, cause: fmt.Errorf("pattern %q: want pkg.Svc/Method or pkg.Svc/*, e.g. examples.greeter.v1.Greeter/*", arg)}
	case checkServiceName(svc, "") != nil || svc == "":
		return "", exitError{code: 2, cause: fmt.Errorf("pattern %q: %q is not a service name; want pkg.Svc/Method or pkg.Svc/*, e.g. examples.greeter.v1.Greeter/SayHello", arg, svc)}
	case method == "":
		return "", exitError{code: 2, cause: fmt.Errorf("pattern %q names no method: write %s/* for every method, or %s/Method for one", arg, svc, svc)}
	case method != "*" && strings.ContainsAny(method, "*/{} \t"):
		return "", exitError{code: 2, cause: fmt.Errorf("pattern %q: a method is an exact name (%s/SayHello) or * for all of them (%s/*); partial wildcards are not supported", arg, svc, svc)}
	}
	return svc, nil
}

// parseRuleArgs reads the RULE arguments of set, saying which one is
// wrong and how to write it.
func parseRuleArgs(specs []string) ([]tunnel.RouteRule, error) {
	rules := make([]tunnel.RouteRule, 0, len(specs))
	for i, spec := range specs {
		rule, err := tunnel.ParseRouteRule(spec)
		if err != nil {
			msg := strings.TrimPrefix(err.Error(), "rpr: ")
			if !strings.Contains(spec, "=>") && strings.Contains(spec, "=") {
				msg += "; a header condition goes before =>, e.g. 'x-canary=true => v2'"
			}
			return nil, exitError{code: 2, cause: fmt.Errorf("rule %d: %s", i+1, msg)}
		}
		rules = append(rules, rule)
	}
	return rules, nil
}

// unreachableRules names the rules that can never match because an
// earlier rule of the same route matches every call or the same calls.
func unreachableRules(rules []tunnel.RouteRule) []string {
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
func covers(a, b tunnel.RouteRule) bool {
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
			return nil, exitError{code: 2, cause: fmt.Errorf("-H %q: want key=value, e.g. -H x-canary=true", h)}
		}
		md.Add(key, strings.TrimSpace(value))
	}
	return md, nil
}

// ---- completion ----

// completeServices completes a SERVICE argument from the services known
// under the prefix; with suffix "/", a PATTERN's service part.
func completeServices(rf *redisFlags, maxArgs int) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) >= maxArgs {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		defer cancel()
		rdb, err := tunnel.Open(ctx, rf.url)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer rdb.Close()
		names, _ := tunnel.ListServices(ctx, rdb, rf.prefix)
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeDrainArgs completes drain's SERVICE, then LANE from the lanes
// the service has.
func completeDrainArgs(rf *redisFlags) cobra.CompletionFunc {
	services := completeServices(rf, 1)
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) != 1 {
			return services(cmd, args, toComplete)
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		defer cancel()
		rdb, err := tunnel.Open(ctx, rf.url)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer rdb.Close()
		lanes, _ := tunnel.Lanes(ctx, rdb, rf.prefix, args[0])
		var out []cobra.Completion
		for _, st := range lanes {
			out = append(out, st.Lane)
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completePatterns completes a PATTERN or METHOD argument: the services
// known under the prefix, then their methods from the published schema
// (and, unless methodsOnly, the wildcard).
func completePatterns(rf *redisFlags, methodsOnly bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		defer cancel()
		rdb, err := tunnel.Open(ctx, rf.url)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer rdb.Close()
		svc, _, typed := strings.Cut(toComplete, "/")
		if !typed {
			names, _ := tunnel.ListServices(ctx, rdb, rf.prefix)
			out := make([]cobra.Completion, len(names))
			for i, n := range names {
				out[i] = n + "/"
			}
			return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
		}
		var out []cobra.Completion
		if !methodsOnly {
			out = append(out, svc+"/*")
		}
		for _, m := range schemaMethods(ctx, rdb, rf.prefix, svc) {
			out = append(out, svc+"/"+m)
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// schemaMethods returns the method names of service in the schema its
// servers published; nil when there is none.
func schemaMethods(ctx context.Context, rdb redis.UniversalClient, prefix, service string) []string {
	files, err := tunnel.LoadSchemaFiles(ctx, rdb, prefix, service)
	if err != nil {
		return nil
	}
	sd, err := tunnel.ServiceInFiles(files, service)
	if err != nil {
		return nil
	}
	return methodNames(sd)
}

// methodHint says, when the service published a schema and it has no
// method named method, that the name may be wrong; "" otherwise.
func methodHint(ctx context.Context, rdb redis.UniversalClient, prefix, service, method string) string {
	if method == "*" {
		return ""
	}
	methods := schemaMethods(ctx, rdb, prefix, service)
	if len(methods) == 0 || slices.Contains(methods, method) {
		return ""
	}
	return fmt.Sprintf("%s has no method %s in the schema its servers published (its methods: %s): check the name", service, method, strings.Join(methods, ", "))
}

// ---- shared by set and rm ----

// routesTarget is a service's routing table and what the commands need
// around it.
type routesTarget struct {
	rdb     redis.UniversalClient
	prefix  string
	service string
	table   *tunnel.RouteTable
}

func openRoutes(ctx context.Context, rf redisFlags, service string) (*routesTarget, error) {
	rdb, err := rf.open(ctx)
	if err != nil {
		return nil, err
	}
	return &routesTarget{rdb: rdb, prefix: rf.prefix, service: service, table: tunnel.NewRouteTable(rdb, rf.prefix, service)}, nil
}

// openChange opens the routes of service for set or rm and reads what the
// change starts from: the table and the lanes. On error nothing is left
// open.
func openChange(ctx context.Context, rf redisFlags, service string) (t *routesTarget, before []tunnel.Route, lanesBefore []tunnel.LaneStatus, err error) {
	if t, err = openRoutes(ctx, rf, service); err != nil {
		return nil, nil, nil, err
	}
	if before, _, err = t.list(ctx); err != nil {
		t.rdb.Close()
		return nil, nil, nil, err
	}
	if lanesBefore, err = tunnel.Lanes(ctx, t.rdb, t.prefix, t.service); err != nil {
		t.rdb.Close()
		return nil, nil, nil, exitError{code: 2, cause: err}
	}
	return t, before, lanesBefore, nil
}

// routeOf returns the route of pattern among routes.
func routeOf(routes []tunnel.Route, pattern string) (tunnel.Route, bool) {
	i := slices.IndexFunc(routes, func(r tunnel.Route) bool { return r.Pattern == pattern })
	if i < 0 {
		return tunnel.Route{}, false
	}
	return routes[i], true
}

// list reads the table; entries that do not decode are returned apart,
// as clients skip them.
func (t *routesTarget) list(ctx context.Context) (routes []tunnel.Route, invalid, err error) {
	routes, err = t.table.List(ctx)
	if err != nil && routes == nil {
		return nil, nil, exitError{code: 2, cause: err}
	}
	return routes, err, nil
}

// routedLanes returns the lanes routes send calls to (weight above 0),
// sorted; the default lane counts only when a rule names it.
func routedLanes(routes []tunnel.Route) []string {
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

func laneStatus(statuses []tunnel.LaneStatus, lane string) (tunnel.LaneStatus, bool) {
	for _, st := range statuses {
		if st.Lane == lane {
			return st, true
		}
	}
	return tunnel.LaneStatus{Lane: lane}, false
}

// laneFlags are set's and rm's flags about the lanes a change leaves.
type laneFlags struct {
	noDrain bool
	drainTo string
}

func (f *laneFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.noDrain, "no-drain", false, "leave the requests of a lane that loses its route and has no live server where they are")
	cmd.Flags().StringVar(&f.drainTo, "drain-to", tunnel.DefaultLane, "lane to move those requests to")
}

func (f *laneFlags) check() error {
	if err := tunnel.ValidateLane(f.drainTo); err != nil {
		return exitError{code: 2, cause: fmt.Errorf("--drain-to: %w", err)}
	}
	return nil
}

// afterChange reports, once the table changed from before to after, the
// lanes the new table routes to that no server serves (stderr; set only,
// with warnUnserved), and deals
// with the lanes it no longer routes to: one with live servers is left to
// them; one without is drained into --drain-to (twice: at once, and again
// once clients have applied the change), unless --no-drain. lanesBefore
// is tunnel.Lanes as read before the change (the Queued of a lane that is
// neither routed nor served any more is not reported after it).
func (t *routesTarget) afterChange(ctx context.Context, out, errOut io.Writer, before, after []tunnel.Route, lanesBefore []tunnel.LaneStatus, lf laneFlags, warnUnserved bool) error {
	lanesAfter, err := tunnel.Lanes(ctx, t.rdb, t.prefix, t.service)
	if err != nil {
		return exitError{code: 1, cause: fmt.Errorf("the routes changed, but the lanes of %s cannot be read to check them: %w (run rpr routes ls %s)", t.service, err, t.service)}
	}
	nowRouted := routedLanes(after)
	for _, lane := range nowRouted {
		if st, _ := laneStatus(lanesAfter, lane); warnUnserved && st.LiveWorkers == 0 {
			fmt.Fprintf(errOut, "warning: lane %s has no live server: unary calls routed to it fail at once (UNAVAILABLE, not executed) and async requests wait in it; start servers with ServerOptions.Lane %q, or route elsewhere\n", lane, lane)
		}
	}
	var drained []string
	var moved int64
	// drain moves what lane holds into --drain-to, counting it in moved.
	drain := func(lane string) (tunnel.DrainResult, error) {
		res, err := tunnel.DrainLane(ctx, t.rdb, t.prefix, t.service, lane, lf.drainTo)
		if err != nil {
			return res, exitError{code: 1, cause: fmt.Errorf("the routes changed, but draining lane %s failed: %w; run rpr routes drain %s %s --to %s", lane, err, t.service, lane, lf.drainTo)}
		}
		moved += res.Moved
		return res, nil
	}
	// left says what a drain of lane left behind, if anything.
	left := func(lane string, res tunnel.DrainResult) string {
		if res.Left == 0 {
			return ""
		}
		return fmt.Sprintf("; %d left (run rpr routes drain %s %s again)", res.Left, t.service, lane)
	}
	for _, lane := range routedLanes(before) {
		if lane == tunnel.DefaultLane || slices.Contains(nowRouted, lane) {
			continue
		}
		st, _ := laneStatus(lanesAfter, lane)
		old, _ := laneStatus(lanesBefore, lane)
		switch {
		case st.LiveWorkers > 0 && st.Queued > 0:
			fmt.Fprintf(out, "lane %s is no longer routed and holds %d request%s: its %d live server%s will drain it; keep them running until `rpr routes ls %s` shows QUEUED 0 for it\n",
				lane, st.Queued, plural(int(st.Queued)), st.LiveWorkers, plural(st.LiveWorkers), t.service)
		case st.LiveWorkers > 0:
			fmt.Fprintf(out, "lane %s is no longer routed and empty; its %d live server%s can be stopped once clients have applied the change (a second)\n", lane, st.LiveWorkers, plural(st.LiveWorkers))
		case lf.noDrain:
			if old.Queued > 0 {
				fmt.Fprintf(out, "lane %s is no longer routed, has no live server and held %d request%s; not moved (--no-drain): they wait until a server of lane %s runs them, or `rpr routes drain %s %s`\n",
					lane, old.Queued, plural(int(old.Queued)), lane, t.service, lane)
			}
		default:
			res, err := drain(lane)
			if err != nil {
				return err
			}
			if res.Moved > 0 || res.Left > 0 || old.Queued > 0 {
				fmt.Fprintf(out, "lane %s is no longer routed and has no live server: moved %d queued request%s to lane %s%s\n", lane, res.Moved, plural(int(res.Moved)), lf.drainTo, left(lane, res))
			}
			drained = append(drained, lane)
		}
	}
	if len(drained) == 0 {
		return nil
	}
	// Clients that had not applied the change yet may have sent more.
	select {
	case <-time.After(routeSettle):
	case <-ctx.Done():
		return exitError{code: 1, cause: fmt.Errorf("the routes changed, but the second drain pass was cut short: %w; run rpr routes drain %s %s", ctx.Err(), t.service, drained[0])}
	}
	for _, lane := range drained {
		res, err := drain(lane)
		if err != nil {
			return err
		}
		if res.Moved > 0 || res.Left > 0 {
			fmt.Fprintf(out, "lane %s: moved %d more request%s that clients sent before applying the change to lane %s%s\n", lane, res.Moved, plural(int(res.Moved)), lf.drainTo, left(lane, res))
		}
	}
	if st, _ := laneStatus(lanesAfter, lf.drainTo); st.LiveWorkers == 0 && moved > 0 {
		fmt.Fprintf(errOut, "warning: lane %s has no live server: the requests moved there wait until one runs them (start servers with ServerOptions.Lane %q, or move them with rpr routes drain %s %s --to LANE)\n", lf.drainTo, lf.drainTo, t.service, lf.drainTo)
	}
	return nil
}

// rulesText renders rules the way set takes them, quoted for a shell.
func rulesText(rules []tunnel.RouteRule) string {
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

// ---- ls ----

func newRoutesLsCommand() *cobra.Command {
	var rf redisFlags
	var output string
	var timeout time.Duration
	const example = "rpr routes ls examples.greeter.v1.Greeter"
	cmd := &cobra.Command{
		Use:   "ls SERVICE",
		Short: "Show a service's routes and lanes",
		Long: `ls prints a service's routing table as clients read it: each method pattern
with its rules in the order they are tried (the form rpr routes set takes),
exact methods before the service's /*; then the entries clients skip
because they do not decode; then the lanes: every lane a route sends calls
to, that a live server serves, and the default lane, with

  ROUTED        whether a route sends calls to it (the default lane takes
                the calls no rule matches, so it always is)
  LIVE SERVERS  servers serving it now (a heartbeat within 5s)
  QUEUED        requests it holds over all shards: waiting, running, and
                async requests waiting for a retry or their time

A lane that is neither routed nor served is not listed, even when it still
holds requests (say, after rpr routes rm --no-drain): rpr routes drain
SERVICE LANE moves them and says how many there were. -o json prints the
same as JSON.`,
		Example: `  rpr routes ls examples.greeter.v1.Greeter
  rpr routes ls examples.greeter.v1.Greeter -o json | jq '.lanes[] | select(.queued > 0)'`,
		Args:              dlqArgs(1, 1, "rpr routes ls SERVICE, e.g. "+example),
		ValidArgsFunction: completeServices(&rf, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkServiceName(args[0], example); err != nil {
				return err
			}
			if output != "table" && output != "json" {
				return exitError{code: 2, cause: fmt.Errorf("-o %q: want table or json, e.g. -o json", output)}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			t, err := openRoutes(ctx, rf, args[0])
			if err != nil {
				return err
			}
			defer t.rdb.Close()
			routes, invalid, err := t.list(ctx)
			if err != nil {
				return err
			}
			lanes, err := tunnel.Lanes(ctx, t.rdb, t.prefix, t.service)
			if err != nil {
				return exitError{code: 2, cause: err}
			}
			if output == "json" {
				return writeRoutesJSON(cmd.OutOrStdout(), t.service, routes, invalid, lanes)
			}
			out := cmd.OutOrStdout()
			printRoutes(out, t.service, routes, invalid, lanes)
			if len(routes) == 0 && invalid == nil {
				if hint := unknownServiceHint(ctx, t.rdb, t.prefix, t.service); hint != "" {
					fmt.Fprintf(out, "note: %s\n", hint)
				}
			}
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up on Redis after this long")
	return cmd
}

func printRoutes(out io.Writer, service string, routes []tunnel.Route, invalid error, lanes []tunnel.LaneStatus) {
	if len(routes) == 0 {
		fmt.Fprintf(out, "%s has no routes: every call goes to the default lane; add one with\n  rpr routes set %s/* 'v1:90,v2:10'\n", service, service)
	} else {
		fmt.Fprintf(out, "%s: %d route%s (first matching rule wins; a method's rules before the service's /*; no match: the default lane)\n", service, len(routes), plural(len(routes)))
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PATTERN\t#\tRULE")
		for _, r := range routes {
			for i, rule := range r.Rules {
				pattern := r.Pattern
				if i > 0 {
					pattern = ""
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\n", pattern, i+1, rule)
			}
		}
		tw.Flush()
	}
	if invalid != nil {
		for _, line := range strings.Split(invalid.Error(), "\n") {
			fmt.Fprintf(out, "invalid, ignored by clients: %s\n", strings.TrimPrefix(line, "rpr: "))
		}
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "LANES")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LANE\tROUTED\tLIVE SERVERS\tQUEUED")
	var notes []string
	for _, st := range lanes {
		routed := "no"
		if st.Routed {
			routed = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", st.Lane, routed, st.LiveWorkers, st.Queued)
		switch {
		case st.Routed && st.LiveWorkers == 0 && st.Lane != tunnel.DefaultLane:
			notes = append(notes, fmt.Sprintf("lane %s is routed but has no live server: its unary calls fail (UNAVAILABLE) and async requests wait; start servers with ServerOptions.Lane %q", st.Lane, st.Lane))
		case !st.Routed && st.Queued > 0:
			notes = append(notes, fmt.Sprintf("lane %s is no longer routed: keep its servers running until QUEUED is 0, or move its requests with rpr routes drain %s %s", st.Lane, service, st.Lane))
		}
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
}

// routeRuleJSON is a rule in `rpr routes ls -o json`.
type routeRuleJSON struct {
	Spec  string              `json:"spec"`
	Match map[string]string   `json:"match,omitempty"`
	Lanes []tunnel.LaneWeight `json:"lanes"`
}

func writeRoutesJSON(out io.Writer, service string, routes []tunnel.Route, invalid error, lanes []tunnel.LaneStatus) error {
	type routeJSON struct {
		Pattern string          `json:"pattern"`
		Rules   []routeRuleJSON `json:"rules"`
	}
	type laneJSON struct {
		Lane        string `json:"lane"`
		Routed      bool   `json:"routed"`
		LiveServers int    `json:"live_servers"`
		Queued      int64  `json:"queued"`
	}
	doc := struct {
		Service string      `json:"service"`
		Routes  []routeJSON `json:"routes"`
		Invalid []string    `json:"invalid"`
		Lanes   []laneJSON  `json:"lanes"`
	}{Service: service, Routes: []routeJSON{}, Invalid: []string{}, Lanes: []laneJSON{}}
	for _, r := range routes {
		rj := routeJSON{Pattern: r.Pattern, Rules: []routeRuleJSON{}}
		for _, rule := range r.Rules {
			rj.Rules = append(rj.Rules, routeRuleJSON{Spec: rule.String(), Match: rule.Match, Lanes: rule.Lanes})
		}
		doc.Routes = append(doc.Routes, rj)
	}
	if invalid != nil {
		for _, line := range strings.Split(invalid.Error(), "\n") {
			doc.Invalid = append(doc.Invalid, strings.TrimPrefix(line, "rpr: "))
		}
	}
	for _, st := range lanes {
		doc.Lanes = append(doc.Lanes, laneJSON{Lane: st.Lane, Routed: st.Routed, LiveServers: st.LiveWorkers, Queued: st.Queued})
	}
	// Rules hold "=>": no HTML escaping, so the specs read as written.
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(doc)
}

// ---- set ----

func newRoutesSetCommand() *cobra.Command {
	var rf redisFlags
	var lf laneFlags
	var timeout time.Duration
	const usage = "rpr routes set PATTERN RULE..., e.g. rpr routes set examples.greeter.v1.Greeter/* 'x-canary=true => v2' 'v1:90,v2:10'"
	cmd := &cobra.Command{
		Use:   "set PATTERN RULE...",
		Short: "Set the rules of a method pattern",
		Long: `set replaces the rules of PATTERN (pkg.Svc/Method, or pkg.Svc/* for every
method of the service) with RULE..., tried in the order given; the first
that matches a call wins. Clients apply the change within a second.

Each RULE is one argument (quote it):

  v2                          every call to lane v2
  v1:90,v2:10                 by weight: 90% to v1, 10% to v2
  x-canary=true => v2         calls whose x-canary header is "true" to v2
  tenant=acme,x-beta=1 => v2:50,default:50

Lanes are 1-32 characters of a-z, 0-9, '.', '_' and '-'; weights are whole
numbers (they need not add up to 100). Nothing is written unless every
rule is valid.

After writing, set warns about each lane the table now routes to that has
no live server. For each lane that it no longer routes to and that still
holds requests: with live servers, they keep serving it until it is empty
(watch QUEUED in rpr routes ls); without, set moves its requests to the
default lane (--drain-to), at once and again two seconds later, for what
clients sent before they applied the change. --no-drain leaves them.

In zsh, quote a PATTERN that ends in /* (or setopt no_nomatch).`,
		Example: `  rpr routes set examples.greeter.v1.Greeter/* v1
  rpr routes set examples.greeter.v1.Greeter/* 'v1:90,v2:10'
  rpr routes set examples.greeter.v1.Greeter/* 'x-canary=true => v2' 'v1:90,v2:10'
  rpr routes set examples.greeter.v1.Greeter/SayHello 'tenant=acme => v2' v1`,
		Args:              dlqArgs(2, -1, usage),
		ValidArgsFunction: completePatterns(&rf, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			service, err := parsePattern(args[0])
			if err != nil {
				return err
			}
			rules, err := parseRuleArgs(args[1:])
			if err != nil {
				return err
			}
			if err := lf.check(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout+routeSettle)
			defer cancel()
			t, before, lanesBefore, err := openChange(ctx, rf, service)
			if err != nil {
				return err
			}
			defer t.rdb.Close()
			if err := t.table.Set(ctx, args[0], rules); err != nil {
				return exitError{code: 2, cause: err}
			}
			after, invalid, err := t.list(ctx)
			if err != nil {
				return exitError{code: 1, cause: fmt.Errorf("the route was written, but reading the table back failed: %w", err)}
			}
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			verb := "added"
			if was, ok := routeOf(before, args[0]); ok {
				verb = "replaced (was: " + rulesText(was.Rules) + ")"
			}
			fmt.Fprintf(out, "%s: %s\n  %s; clients apply it within a second\n", args[0], rulesText(rules), verb)
			for _, w := range unreachableRules(rules) {
				fmt.Fprintf(errOut, "warning: %s\n", w)
			}
			if method := strings.TrimPrefix(args[0], service+"/"); method != "" {
				if hint := methodHint(ctx, t.rdb, t.prefix, service, method); hint != "" {
					fmt.Fprintf(errOut, "warning: %s\n", hint)
				}
			}
			if hint := unknownServiceHint(ctx, t.rdb, t.prefix, service); hint != "" {
				fmt.Fprintf(errOut, "note: %s\n", hint)
			}
			if invalid != nil {
				fmt.Fprintf(errOut, "note: the table also holds entries clients skip: %v\n", invalid)
			}
			return t.afterChange(ctx, out, errOut, before, after, lanesBefore, lf, true)
		},
	}
	rf.register(cmd)
	lf.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up on Redis after this long")
	return cmd
}

// ---- rm ----

func newRoutesRmCommand() *cobra.Command {
	var rf redisFlags
	var lf laneFlags
	var timeout time.Duration
	const usage = "rpr routes rm PATTERN, e.g. rpr routes rm examples.greeter.v1.Greeter/*"
	cmd := &cobra.Command{
		Use:   "rm PATTERN",
		Short: "Remove the route of a method pattern",
		Long: `rm deletes the route of PATTERN; clients stop applying it within a second,
and the calls it matched go by the service's /* route, else to the default
lane. It exits 1 when there is no such route.

A lane that no route sends calls to any more is dealt with as by set: left
to its live servers to finish, or, with none, its requests moved to the
default lane (--drain-to; --no-drain leaves them).`,
		Example: `  rpr routes rm examples.greeter.v1.Greeter/*
  rpr routes rm examples.greeter.v1.Greeter/SayHello --no-drain`,
		Args:              dlqArgs(1, 1, usage),
		ValidArgsFunction: completePatterns(&rf, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			service, err := parsePattern(args[0])
			if err != nil {
				return err
			}
			if err := lf.check(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout+routeSettle)
			defer cancel()
			t, before, lanesBefore, err := openChange(ctx, rf, service)
			if err != nil {
				return err
			}
			defer t.rdb.Close()
			removed, err := t.table.Remove(ctx, args[0])
			if err != nil {
				return exitError{code: 2, cause: err}
			}
			if !removed {
				has := "it has none"
				if len(before) > 0 {
					var patterns []string
					for _, r := range before {
						patterns = append(patterns, r.Pattern)
					}
					has = "its routes: " + strings.Join(patterns, ", ")
				}
				return exitError{code: 1, cause: fmt.Errorf("%s has no route %s (%s)", service, args[0], has)}
			}
			after, _, err := t.list(ctx)
			if err != nil {
				return exitError{code: 1, cause: fmt.Errorf("the route was removed, but reading the table back failed: %w", err)}
			}
			out := cmd.OutOrStdout()
			if was, ok := routeOf(before, args[0]); ok {
				fmt.Fprintf(out, "%s: removed (was: %s); clients stop applying it within a second\n", args[0], rulesText(was.Rules))
			}
			return t.afterChange(ctx, out, cmd.ErrOrStderr(), before, after, lanesBefore, lf, false)
		},
	}
	rf.register(cmd)
	lf.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up on Redis after this long")
	return cmd
}

// ---- test ----

func newRoutesTestCommand() *cobra.Command {
	var rf redisFlags
	var headers []string
	var timeout time.Duration
	const usage = "rpr routes test METHOD [-H key=value ...], e.g. rpr routes test examples.greeter.v1.Greeter/SayHello -H x-canary=true"
	cmd := &cobra.Command{
		Use:   "test METHOD [-H key=value ...]",
		Short: "Show where a call would go under the current routes",
		Long: `test says where a call to METHOD (pkg.Svc/Method) with the given request
headers would go under the routing table in Redis now: the pattern and rule
that match, and each lane it may go to with its chance. It warns about
lanes with no live server, where such a call would fail. Nothing is sent.`,
		Example: `  rpr routes test examples.greeter.v1.Greeter/SayHello
  rpr routes test examples.greeter.v1.Greeter/SayHello -H x-canary=true -H tenant=acme`,
		Args:              dlqArgs(1, 1, usage),
		ValidArgsFunction: completePatterns(&rf, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			service, err := parsePattern(args[0])
			if err != nil {
				return err
			}
			method := strings.TrimPrefix(args[0], service+"/")
			if method == "*" {
				return exitError{code: 2, cause: fmt.Errorf("%q: test takes one method, e.g. %s/SayHello", args[0], service)}
			}
			header, err := parseHeaderFlags(headers)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			t, err := openRoutes(ctx, rf, service)
			if err != nil {
				return err
			}
			defer t.rdb.Close()
			d, err := t.table.Test(ctx, method, header)
			if err != nil {
				return exitError{code: 2, cause: err}
			}
			_, invalid, err := t.list(ctx) // for the note on entries clients skip
			if err != nil {
				return err
			}
			lanes, err := tunnel.Lanes(ctx, t.rdb, t.prefix, t.service)
			if err != nil {
				return exitError{code: 2, cause: err}
			}
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			fmt.Fprintf(out, "%s%s\n", args[0], headerText(header))
			if d.Rule == nil {
				fmt.Fprintf(out, "  no rule matches: the default lane\n")
			} else {
				fmt.Fprintf(out, "  matches %s rule %d: %s\n", d.Pattern, d.RuleNumber, d.Rule)
			}
			type share struct {
				lane string
				p    float64
			}
			var shares []share
			for lane, p := range d.Lanes {
				shares = append(shares, share{lane, p})
			}
			sort.Slice(shares, func(i, j int) bool {
				if shares[i].p != shares[j].p {
					return shares[i].p > shares[j].p
				}
				return shares[i].lane < shares[j].lane
			})
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  LANE\tSHARE\tLIVE SERVERS")
			for _, s := range shares {
				st, _ := laneStatus(lanes, s.lane)
				fmt.Fprintf(tw, "  %s\t%s\t%d\n", s.lane, percent(s.p), st.LiveWorkers)
			}
			tw.Flush()
			for _, s := range shares {
				if st, _ := laneStatus(lanes, s.lane); st.LiveWorkers == 0 {
					fmt.Fprintf(errOut, "warning: lane %s has no live server: a unary call sent there now fails (UNAVAILABLE, not executed); an async request waits in it\n", s.lane)
				}
			}
			if invalid != nil {
				fmt.Fprintf(errOut, "note: the table holds entries clients skip: %v\n", invalid)
			}
			if hint := methodHint(ctx, t.rdb, t.prefix, service, method); hint != "" {
				fmt.Fprintf(errOut, "warning: %s\n", hint)
			}
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringArrayVarP(&headers, "header", "H", nil, "request header as key=value (repeatable)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up on Redis after this long")
	return cmd
}

// headerText renders test's headers for its first line.
func headerText(md tunnel.Metadata) string {
	if len(md) == 0 {
		return " (no headers)"
	}
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		for _, v := range md[k] {
			parts = append(parts, k+"="+v)
		}
	}
	return " with " + strings.Join(parts, ", ")
}

// percent renders a chance (0-1) as a percentage without noise.
func percent(p float64) string {
	s := fmt.Sprintf("%.1f", 100*p)
	return strings.TrimSuffix(s, ".0") + "%"
}

// ---- drain ----

func newRoutesDrainCommand() *cobra.Command {
	var rf redisFlags
	var to string
	var timeout time.Duration
	const usage = "rpr routes drain SERVICE LANE [--to LANE], e.g. rpr routes drain examples.greeter.v1.Greeter v2"
	cmd := &cobra.Command{
		Use:   "drain SERVICE LANE [--to LANE]",
		Short: "Move the requests queued in a lane to another lane",
		Long: `drain moves the requests queued in LANE of SERVICE, in every shard, to the
lane --to (default: the default lane), each in one atomic step, so that
the servers of that lane run them: use it for a lane that lost its route
and whose servers are gone. Requests its live servers are running stay
theirs ("left"); when it has no live server, those its dead servers had
taken move too, and are settled like those of a crashed worker (run again
only when the method is idempotent).

rpr routes set and rm do this by themselves for a lane they leave without
a route or server; drain is for doing it by hand.`,
		Example: `  rpr routes drain examples.greeter.v1.Greeter v2
  rpr routes drain examples.greeter.v1.Greeter canary --to v1`,
		Args:              dlqArgs(2, 2, usage),
		ValidArgsFunction: completeDrainArgs(&rf),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkServiceName(args[0], usage); err != nil {
				return err
			}
			from := args[1]
			if err := tunnel.ValidateLane(from); err != nil {
				return exitError{code: 2, cause: fmt.Errorf("LANE: %w", err)}
			}
			if err := tunnel.ValidateLane(to); err != nil {
				return exitError{code: 2, cause: fmt.Errorf("--to: %w", err)}
			}
			if from == to {
				return exitError{code: 2, cause: fmt.Errorf("lane %s drained into itself: name another lane with --to, e.g. --to v1 (default: %s)", from, tunnel.DefaultLane)}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			t, err := openRoutes(ctx, rf, args[0])
			if err != nil {
				return err
			}
			defer t.rdb.Close()
			lanes, err := tunnel.Lanes(ctx, t.rdb, t.prefix, t.service)
			if err != nil {
				return exitError{code: 2, cause: err}
			}
			errOut := cmd.ErrOrStderr()
			if st, _ := laneStatus(lanes, from); st.Routed {
				fmt.Fprintf(errOut, "warning: lane %s is still routed: clients keep sending calls to it; change the routes first (rpr routes set / rm)\n", from)
			}
			res, err := tunnel.DrainLane(ctx, t.rdb, t.prefix, t.service, from, to)
			if err != nil {
				return exitError{code: 1, cause: err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: moved %d request%s from lane %s to lane %s; %d left",
				t.service, res.Moved, plural(int(res.Moved)), from, to, res.Left)
			if st, _ := laneStatus(lanes, from); res.Left > 0 && st.LiveWorkers > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), " (running on lane %s's %d live server%s, which finish them)", from, st.LiveWorkers, plural(st.LiveWorkers))
			}
			fmt.Fprintln(cmd.OutOrStdout())
			if st, _ := laneStatus(lanes, to); st.LiveWorkers == 0 && res.Moved > 0 {
				fmt.Fprintf(errOut, "warning: lane %s has no live server: the moved requests wait there until one runs them\n", to)
			}
			if res.Moved == 0 && res.Left == 0 {
				if hint := unknownServiceHint(ctx, t.rdb, t.prefix, t.service); hint != "" {
					fmt.Fprintf(errOut, "note: %s\n", hint)
				}
			}
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVar(&to, "to", tunnel.DefaultLane, "lane to move the requests to")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "give up on Redis after this long")
	return cmd
}
