package main

// rpr routes set and rm, and what they do about the lanes a change leaves
// without a route.

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

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
  tenant="a,b" => v2          a value with ',' or '"' (or spaces at its ends)
                              in double quotes, as a Go string literal

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
		Args:              usageArgs(2, -1, usage),
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
				return badInput(err)
			}
			after, invalid, err := t.list(ctx)
			if err != nil {
				return failed(fmt.Errorf("the route was written, but reading the table back failed: %w", err))
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
				if hint := methodHint(ctx, t.svc, method); hint != "" {
					fmt.Fprintf(errOut, "warning: %s\n", hint)
				}
			}
			if hint := unknownServiceHint(ctx, t.a, service); hint != "" {
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
		Args:              usageArgs(1, 1, usage),
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
				return badInput(err)
			}
			if !removed && len(before) == 0 {
				// Nothing set: perhaps a mistyped name.
				if err := requireService(ctx, t.a, rf.url, service); err != nil {
					return err
				}
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
				return failed(fmt.Errorf("%s has no route %s (%s)", service, args[0], has))
			}
			after, _, err := t.list(ctx)
			if err != nil {
				return failed(fmt.Errorf("the route was removed, but reading the table back failed: %w", err))
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

// openChange opens the routes of service for set or rm and reads what the
// change starts from: the table and the lanes. On error nothing is left
// open.
func openChange(ctx context.Context, rf redisFlags, service string) (t *routesTarget, before []admin.Route, lanesBefore []admin.LaneStatus, err error) {
	if t, err = openRoutes(ctx, rf, service); err != nil {
		return nil, nil, nil, err
	}
	if before, _, err = t.list(ctx); err != nil {
		t.rdb.Close()
		return nil, nil, nil, err
	}
	if lanesBefore, err = t.svc.Lanes(ctx); err != nil {
		t.rdb.Close()
		return nil, nil, nil, badInput(err)
	}
	return t, before, lanesBefore, nil
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
	if err := admin.ValidateLane(f.drainTo); err != nil {
		return badInput(fmt.Errorf("--drain-to: %w", err))
	}
	return nil
}

// afterChange reports, once the table changed from before to after, the
// lanes the new table routes to that no server serves (stderr; set only,
// with warnUnserved), and deals
// with the lanes it no longer routes to: one with live servers is left to
// them; one without is drained into --drain-to (twice: at once, and again
// once clients have applied the change), unless --no-drain. lanesBefore
// is Service.Lanes as read before the change (the Queued of a lane that is
// neither routed nor served any more is not reported after it).
func (t *routesTarget) afterChange(ctx context.Context, out, errOut io.Writer, before, after []admin.Route, lanesBefore []admin.LaneStatus, lf laneFlags, warnUnserved bool) error {
	lanesAfter, err := t.svc.Lanes(ctx)
	if err != nil {
		return failed(fmt.Errorf("the routes changed, but the lanes of %s cannot be read to check them: %w (run rpr routes ls %s)", t.service, err, t.service))
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
	drain := func(lane string) (admin.DrainResult, error) {
		res, err := t.svc.Drain(ctx, lane, lf.drainTo)
		if err != nil {
			return res, failed(fmt.Errorf("the routes changed, but draining lane %s failed: %w; run rpr routes drain %s %s --to %s", lane, err, t.service, lane, lf.drainTo))
		}
		moved += res.Moved
		return res, nil
	}
	// left says what a drain of lane left behind, if anything.
	left := func(lane string, res admin.DrainResult) string {
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
		return failed(fmt.Errorf("the routes changed, but the second drain pass was cut short: %w; run rpr routes drain %s %s", ctx.Err(), t.service, drained[0]))
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
