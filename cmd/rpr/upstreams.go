package main

// rpr upstreams: the table that tells rpr egress where to forward the
// HTTP and gRPC traffic of rpr ingress (see package upstream).

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
)

const upstreamsHelp = `upstreams shows and changes the routes rpr ingress and rpr egress forward
existing HTTP and gRPC services by. A route takes the requests whose host and
path match it and names the one upstream an egress sends them to; egresses
never forward anywhere else. The table lives in Redis; every ingress and
egress applies a change within a second, and set and rm wait until every
running egress and ingress has (--wait).`

func newUpstreamsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "upstreams",
		Short: "Show and change where rpr egress forwards tunnelled HTTP and gRPC traffic",
		Long:  upstreamsHelp,
	}
	return commandGroup(cmd, "ls, set or rm", newUpstreamsLsCommand(), newUpstreamsSetCommand(), newUpstreamsRmCommand())
}

// upstreamsTimeout bounds the Redis work of one upstreams command, the
// wait for egresses aside.
const upstreamsTimeout = 10 * time.Second

func newUpstreamsSetCommand() *cobra.Command {
	var rf redisFlags
	var r upstream.Route
	var timeout time.Duration
	var mode string
	var wait time.Duration
	const usage = "rpr upstreams set NAME --upstream URL [--host H] [--path PREFIX], e.g. rpr upstreams set orders --path /orders --upstream http://10.0.0.5:8080"
	cmd := &cobra.Command{
		Use:   "set NAME --upstream URL",
		Short: "Add or replace a route",
		Long: `set adds route NAME, or replaces it. An http:// or https:// upstream makes it a
route of the HTTP table, grpc:// (cleartext HTTP/2) or grpcs:// (TLS) one of the
gRPC table, whose paths are /package.Service/Method.

A request takes the route with the most specific --host (an exact name, then
*.domain, then any host), then the longest --path prefix (matched on a segment
boundary: /api takes /api and /api/x, not /apis).

--mode says how rpr ingress answers: sync waits for the upstream's response
(the default; it must fit in one message, 4 MiB), stream relays it as it
arrives (downloads, server-sent events; a request that accepts
text/event-stream is streamed on any route), async answers 202 Accepted with a
receipt at once and lets the egress deliver it, retrying 5xx answers and
timeouts and dead-lettering 4xx answers (rpr dlq ls rpr.tunnel.v1.HTTP).

It then waits until every running egress and ingress forwards by the new
table (--wait): exit status 0 when they all do, 1 when one did not within the
wait. An ingress that was killed counts as running for 30s after its last
report; one that stopped cleanly withdraws at once.`,
		Example: `  rpr upstreams set orders --path /orders --upstream http://10.0.0.5:8080
  rpr upstreams set shop --host shop.example.com --upstream https://shop.internal --timeout 10s
  rpr upstreams set events --path /events --upstream http://10.0.0.7:8080 --mode stream
  rpr upstreams set webhooks --path /hooks --upstream http://10.0.0.8:8080 --mode async
  rpr upstreams set greeter --path /helloworld.Greeter/ --upstream grpc://10.0.0.6:9090`,
		Args: usageArgs(1, 1, usage),
		RunE: func(cmd *cobra.Command, args []string) error {
			r.Name, r.Mode, r.Timeout = args[0], upstream.Mode(mode), upstream.Duration(timeout)
			kind := upstream.KindOf(r.Upstream)
			if err := r.Check(kind); err != nil {
				return badInput(err)
			}
			ctx, rdb, done, err := rf.connectRedis(cmd, upstreamsTimeout+wait)
			if err != nil {
				return err
			}
			defer done()
			s := upstream.NewStore(rdb, rf.prefix, kind)
			version, err := s.Set(ctx, r)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "route %s (%s): %s -> %s\n", r.Name, kind, describeMatch(r), describeTarget(r))
			return waitForwarders(ctx, out, rf.handle(rdb), s, version, wait)
		},
	}
	rf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&r.Upstream, "upstream", "", "where the route's requests go: http://host:port[/base], https://…, grpc://host:port or grpcs://host:port")
	f.StringVar(&r.Host, "host", "", "match this host (exact, or *.example.com); default any host")
	f.StringVar(&r.PathPrefix, "path", "/", "match paths under this prefix")
	f.BoolVar(&r.StripPrefix, "strip-prefix", false, "remove the --path prefix before forwarding")
	f.StringVar(&mode, "mode", string(upstream.ModeSync), "sync, stream or async (HTTP only)")
	f.DurationVar(&timeout, "timeout", 0, "deadline of a request that brings none (on a stream route: of its response's head); default 30s for HTTP routes, none for gRPC routes")
	f.Int64Var(&r.MaxBodyBytes, "max-body", upstream.DefaultMaxBodyBytes, "largest request body, bytes")
	f.IntVar(&r.Concurrency, "concurrency", upstream.DefaultConcurrency, "requests one egress has in flight to the upstream, at most")
	f.StringVar(&r.Lane, "lane", "", "rpr lane whose egresses serve the route (rpr egress --lane); default lane if empty")
	f.DurationVar(&wait, "wait", 5*time.Second, "how long to wait for the running egresses and ingresses to apply the change (0: do not wait)")
	return cmd
}

func newUpstreamsRmCommand() *cobra.Command {
	var rf redisFlags
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a route",
		Long: `rm removes route NAME from whichever table holds it, then waits, as set does,
until every running egress and ingress forwards without it.`,
		Example: "  rpr upstreams rm orders",
		Args:    usageArgs(1, 1, "rpr upstreams rm NAME, e.g. rpr upstreams rm orders"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, rdb, done, err := rf.connectRedis(cmd, upstreamsTimeout+2*wait)
			if err != nil {
				return err
			}
			defer done()
			removed := false
			for _, kind := range []upstream.Kind{upstream.HTTP, upstream.GRPC} {
				s := upstream.NewStore(rdb, rf.prefix, kind)
				t, err := s.Load(ctx)
				if err != nil {
					return err
				}
				if !hasRoute(t, args[0]) {
					continue
				}
				version, _, err := s.Remove(ctx, args[0])
				if err != nil {
					return err
				}
				removed = true
				fmt.Fprintf(cmd.OutOrStdout(), "route %s (%s): removed\n", args[0], kind)
				if err := waitForwarders(ctx, cmd.OutOrStdout(), rf.handle(rdb), s, version, wait); err != nil {
					return err
				}
			}
			if !removed {
				return failed(fmt.Errorf("no route %s (rpr upstreams ls)", args[0]))
			}
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().DurationVar(&wait, "wait", 5*time.Second, "how long to wait for the running egresses and ingresses to apply the change (0: do not wait)")
	return cmd
}

func hasRoute(t *upstream.Table, name string) bool {
	if _, bad := t.Invalid[name]; bad {
		return true
	}
	return slices.ContainsFunc(t.Routes(), func(r upstream.Route) bool { return r.Name == name })
}

func newUpstreamsLsCommand() *cobra.Command {
	var rf redisFlags
	var output string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the routes, and which table version each egress and ingress forwards by",
		Args:  usageArgs(0, 0, "rpr upstreams ls"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			ctx, rdb, done, err := rf.connectRedis(cmd, upstreamsTimeout)
			if err != nil {
				return err
			}
			defer done()
			type listing struct {
				Kind    string                     `json:"kind"`
				Version int64                      `json:"version"`
				Routes  []upstream.Route           `json:"routes"`
				Names   []string                   `json:"names"`
				Invalid map[string]string          `json:"invalid,omitempty"`
				Applied map[string]upstream.Report `json:"applied"`
			}
			var all []listing
			for _, kind := range []upstream.Kind{upstream.HTTP, upstream.GRPC} {
				s := upstream.NewStore(rdb, rf.prefix, kind)
				t, err := s.Load(ctx)
				if err != nil {
					return err
				}
				applied, err := s.Applied(ctx)
				if err != nil {
					return err
				}
				l := listing{Kind: kind.String(), Version: t.Version, Routes: t.Routes(), Applied: applied, Invalid: map[string]string{}}
				for _, r := range l.Routes {
					l.Names = append(l.Names, r.Name)
				}
				for name, err := range t.Invalid {
					l.Invalid[name] = err.Error()
				}
				all = append(all, l)
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				return writeJSON(out, all)
			}
			for i, l := range all {
				if i > 0 {
					fmt.Fprintln(out)
				}
				printUpstreams(out, l.Kind, l.Version, l.Routes, l.Invalid, l.Applied)
			}
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

func printUpstreams(out io.Writer, kind string, version int64, routes []upstream.Route, invalid map[string]string, applied map[string]upstream.Report) {
	fmt.Fprintf(out, "%s routes (table version %d)\n", kind, version)
	if len(routes) == 0 && len(invalid) == 0 {
		fmt.Fprintln(out, "  none: add one with rpr upstreams set NAME --path PREFIX --upstream URL")
	} else {
		tw := newTable(out)
		fmt.Fprintln(tw, "  NAME\tHOST\tPATH\tUPSTREAM\tMODE\tTIMEOUT\tMAX BODY\tCONCURRENCY\tLANE")
		for _, r := range routes {
			path := r.PathPrefix
			if r.StripPrefix {
				path += " (stripped)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%v\t%d\t%d\t%s\n", r.Name, orDash(r.Host), path, r.Upstream, r.Mode,
				time.Duration(r.Timeout), r.MaxBodyBytes, r.Concurrency, orDash(r.Lane))
		}
		_ = tw.Flush()
		for _, name := range slices.Sorted(maps.Keys(invalid)) {
			fmt.Fprintf(out, "  %s: ignored by ingresses and egresses: %s\n", name, invalid[name])
		}
	}
	now := time.Now()
	for _, id := range slices.Sorted(maps.Keys(applied)) {
		r := applied[id]
		state := "current"
		if r.Version < version {
			state = "behind"
		}
		role := "egress"
		if upstream.IsIngress(id) {
			role = "ingress"
			if now.Sub(r.Reported) >= upstream.IngressStale {
				state = "stopped, no report for " + now.Sub(r.Reported).Round(time.Second).String()
			}
		}
		fmt.Fprintf(out, "  %s %s forwards by version %d (%s)\n", role, id, r.Version, state)
	}
}

// describeMatch says which requests r takes.
func describeMatch(r upstream.Route) string {
	host := "any host"
	if r.Host != "" {
		host = r.Host
	}
	return fmt.Sprintf("%s, %s", host, r.PathPrefix)
}

// describeTarget says where r's requests go and how.
func describeTarget(r upstream.Route) string {
	s := fmt.Sprintf("%s (%s, timeout %v", r.Upstream, r.Mode, time.Duration(r.Timeout))
	if r.Lane != "" {
		s += ", lane " + r.Lane
	}
	return s + ")"
}

// waitForwarders waits until every live egress of s's service, and every
// ingress that reported lately, forwards by version, and says so.
func waitForwarders(ctx context.Context, out io.Writer, a *admin.Client, s *upstream.Store, version int64, wait time.Duration) error {
	if wait <= 0 {
		fmt.Fprintf(out, "table version %d; not waiting for egresses and ingresses\n", version)
		return nil
	}
	health, err := a.Service(s.Kind().Service()).Health(ctx)
	if err != nil {
		return err
	}
	var egresses []string
	for _, w := range health.Workers {
		if w.Live {
			egresses = append(egresses, w.ID)
		}
	}
	applied, err := s.Applied(ctx)
	if err != nil {
		return err
	}
	ingresses := upstream.LiveIngresses(applied, time.Now())
	if len(egresses)+len(ingresses) == 0 {
		fmt.Fprintf(out, "table version %d; no egress or ingress is running: each loads the table when it starts\n", version)
		return nil
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	behind, err := s.WaitApplied(waitCtx, version, slices.Concat(egresses, ingresses), 50*time.Millisecond)
	if err != nil {
		return err
	}
	if len(behind) > 0 {
		return failed(fmt.Errorf("table version %d: %d of %d running egresses and ingresses did not apply it within %v: %s (are they running, able to read Redis, and of this rpr release? an ingress that stopped without a clean exit counts for %v after its last report)",
			version, len(behind), len(egresses)+len(ingresses), wait, strings.Join(behind, ", "), upstream.IngressStale))
	}
	fmt.Fprintf(out, "table version %d: applied by %s and %s; no request goes by the old table now\n", version,
		countNames(egresses, "egress", "egresses"), countNames(ingresses, "ingress", "ingresses"))
	return nil
}

// countNames says how many names there are and which: "2 egresses (a, b)".
func countNames(names []string, one, many string) string {
	switch len(names) {
	case 0:
		return "no " + one
	case 1:
		return fmt.Sprintf("1 %s (%s)", one, names[0])
	}
	return fmt.Sprintf("%d %s (%s)", len(names), many, strings.Join(names, ", "))
}
