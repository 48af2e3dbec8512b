package main

// rpr routes test: where a call would go under the routes in Redis now.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/tunnel"
)

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
		Args:              usageArgs(1, 1, usage),
		ValidArgsFunction: completePatterns(&rf, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			service, err := parsePattern(args[0])
			if err != nil {
				return err
			}
			method := strings.TrimPrefix(args[0], service+"/")
			if method == "*" {
				return badInput(fmt.Errorf("%q: test takes one method, e.g. %s/SayHello", args[0], service))
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
				return badInput(err)
			}
			if d.Rule == nil {
				// No route of its own: perhaps a mistyped name.
				if err := requireService(ctx, t.a, rf.url, service); err != nil {
					return err
				}
			}
			_, invalid, err := t.list(ctx) // for the note on entries clients skip
			if err != nil {
				return err
			}
			lanes, err := t.svc.Lanes(ctx)
			if err != nil {
				return badInput(err)
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
			tw := newTable(out)
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
			if hint := methodHint(ctx, t.svc, method); hint != "" {
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
