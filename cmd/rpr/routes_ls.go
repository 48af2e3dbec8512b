package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

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
		Args:              usageArgs(1, 1, "rpr routes ls SERVICE, e.g. "+example),
		ValidArgsFunction: completeServices(&rf, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkServiceName(args[0], example); err != nil {
				return err
			}
			if err := checkOutput(output, "table", "json"); err != nil {
				return err
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
			lanes, err := t.svc.Lanes(ctx)
			if err != nil {
				return badInput(err)
			}
			if len(routes) == 0 && invalid == nil {
				// Nothing set: perhaps a mistyped name.
				if err := requireService(ctx, t.a, rf.url, t.service); err != nil {
					return err
				}
			}
			if output == "json" {
				return writeRoutesJSON(cmd.OutOrStdout(), t.service, routes, invalid, lanes)
			}
			printRoutes(cmd.OutOrStdout(), t.service, routes, invalid, lanes)
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up on Redis after this long")
	return cmd
}

func printRoutes(out io.Writer, service string, routes []admin.Route, invalid error, lanes []admin.LaneStatus) {
	if len(routes) == 0 {
		fmt.Fprintf(out, "%s has no routes: every call goes to the default lane; add one with\n  rpr routes set %s/* 'v1:90,v2:10'\n", service, service)
	} else {
		fmt.Fprintf(out, "%s: %d route%s (first matching rule wins; a method's rules before the service's /*; no match: the default lane)\n", service, len(routes), plural(len(routes)))
		tw := newTable(out)
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
	tw := newTable(out)
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
	Spec  string             `json:"spec"`
	Match map[string]string  `json:"match,omitempty"`
	Lanes []admin.LaneWeight `json:"lanes"`
}

func writeRoutesJSON(out io.Writer, service string, routes []admin.Route, invalid error, lanes []admin.LaneStatus) error {
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
	return writeJSONUnescaped(out, doc)
}
