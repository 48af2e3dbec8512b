package main

// rpr limits: list and change a service's rate limits, the rules clients
// read from Redis every second. The admin handle checks rules
// (admin.LimitRule.Normalize); these commands map its errors onto the flags
// that caused them, with an example, and exit status 2.

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
)

func newLimitsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "List, set and remove a service's rate limits",
		Long: `limits manages a service's rate limits: rules in the hash rpr:v1:{pkg.Svc}:limits
that every client reads once a second, so a change applies within a second,
without restarts. A rule allows each caller (the x-rpr-caller header, else
the client's id; see ClientOptions.LimitKey) of a tier (x-rpr-tier, else
"normal") LIMIT calls to a method (or "*", all methods together) per
sliding WINDOW. A call is checked, in the client before it enters Redis,
against every rule that matches its method and tier; a refused call fails
with RESOURCE_EXHAUSTED and a retry-after, and is not sent.

Algorithms:
  log   exact sliding log: no window of WINDOW holds more than LIMIT calls;
        memory per caller grows with LIMIT: about 24 bytes per call in the
        window while there are at most 128, about 130 bytes each beyond
  gcra  constant memory (about 90 bytes per caller): calls spaced
        WINDOW/LIMIT apart, with bursts of up to --burst (default LIMIT)
        after a quiet spell, so a window may hold up to LIMIT+BURST-1 calls`,
		Example: `  rpr limits ls examples.orders.v1.Orders
  rpr limits set examples.orders.v1.Orders free --tier free --limit 10 --window 1s
  rpr limits set examples.orders.v1.Orders vip-search --method Search --tier vip --limit 1000 --window 1s --algorithm gcra
  rpr limits rm examples.orders.v1.Orders free`,
	}
	return commandGroup(cmd, "ls, set or rm",
		newLimitsLsCommand(), newLimitsSetCommand(), newLimitsRmCommand())
}

// checkLimitsService refuses a SERVICE argument that cannot be a service
// name; usage is the command's, for the message.
func checkLimitsService(arg, usage string) error {
	switch {
	case arg == "":
		return badInput(fmt.Errorf("name the service: %s", usage))
	case strings.Contains(arg, "/"):
		svc, method, _ := strings.Cut(arg, "/")
		return badInput(fmt.Errorf("%q names a method; name the service and the method with --method: %s ... --method %s", arg, svc, method))
	case strings.ContainsAny(arg, "{} \t:"):
		return badInput(fmt.Errorf("%q is not a service name; write pkg.Service, e.g. examples.orders.v1.Orders", arg))
	}
	return nil
}

// ---- ls ----

func newLimitsLsCommand() *cobra.Command {
	var rf redisFlags
	var output string
	var timeout time.Duration
	const usage = "rpr limits ls SERVICE, e.g. rpr limits ls examples.orders.v1.Orders"
	cmd := &cobra.Command{
		Use:   "ls SERVICE",
		Short: "List a service's rate-limit rules",
		Long: `ls prints a service's rate-limit rules as clients read them, by name, and
the entries of its limits hash that are not valid rules (clients ignore
those and log a warning). -o json prints the same as JSON.`,
		Example: `  rpr limits ls examples.orders.v1.Orders
  rpr limits ls examples.orders.v1.Orders -o json | jq '.rules[].name'`,
		Args:              usageArgs(1, 1, usage),
		ValidArgsFunction: completeServices(&rf, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkLimitsService(args[0], usage); err != nil {
				return err
			}
			if err := checkOutput(output, "table", "json"); err != nil {
				return err
			}
			ctx, a, done, err := rf.connect(cmd, timeout)
			if err != nil {
				return err
			}
			defer done()
			limits := a.Service(args[0]).Limits()
			rules, invalid, err := limits.List(ctx)
			if err != nil {
				return badInput(err)
			}
			key := limits.Key()
			if len(rules) == 0 && len(invalid) == 0 {
				// Nothing set: perhaps a mistyped name.
				if err := requireService(ctx, a, rf.url, args[0]); err != nil {
					return err
				}
			}
			if output == "json" {
				return writeLimitsJSON(cmd.OutOrStdout(), args[0], key, rules, invalid)
			}
			printLimits(cmd.OutOrStdout(), args[0], key, rules, invalid)
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up on Redis after this long")
	return cmd
}

func printLimits(out io.Writer, service, key string, rules []admin.LimitRule, invalid []admin.InvalidLimit) {
	if len(rules) == 0 && len(invalid) == 0 {
		fmt.Fprintf(out, "%s has no rate limits (%s is empty); add one with\n  rpr limits set %s RULE --limit 100 --window 1s\n", service, key, service)
		return
	}
	fmt.Fprintf(out, "%s: %d rate-limit rule%s (%s; clients apply changes within a second)\n", service, len(rules), plural(len(rules)), key)
	if len(rules) > 0 {
		tw := newTable(out)
		fmt.Fprintln(tw, "RULE\tMETHOD\tTIER\tLIMIT\tWINDOW\tALGORITHM\tBURST")
		for _, r := range rules {
			burst := "-"
			if r.Algorithm == admin.LimitGCRA {
				burst = strconv.FormatInt(r.Burst, 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%v\t%s\t%s\n", r.Name, r.Method, r.Tier, r.Limit, r.Window, r.Algorithm, burst)
		}
		tw.Flush()
	}
	for _, bad := range invalid {
		fmt.Fprintf(out, "invalid, ignored by clients: %s = %s: %v (fix with rpr limits set, or rpr limits rm %s %s)\n", bad.Name, bad.Raw, bad.Err, service, bad.Name)
	}
}

// limitJSON is a rule in `rpr limits ls -o json`.
type limitJSON struct {
	Name      string `json:"name"`
	Method    string `json:"method"`
	Tier      string `json:"tier"`
	Limit     int64  `json:"limit"`
	Window    string `json:"window"`
	Algorithm string `json:"algorithm"`
	Burst     int64  `json:"burst,omitempty"`
}

func writeLimitsJSON(out io.Writer, service, key string, rules []admin.LimitRule, invalid []admin.InvalidLimit) error {
	type invalidJSON struct {
		Name  string `json:"name"`
		Value string `json:"value"`
		Error string `json:"error"`
	}
	doc := struct {
		Service string        `json:"service"`
		Key     string        `json:"key"`
		Rules   []limitJSON   `json:"rules"`
		Invalid []invalidJSON `json:"invalid"`
	}{Service: service, Key: key, Rules: []limitJSON{}, Invalid: []invalidJSON{}}
	for _, r := range rules {
		doc.Rules = append(doc.Rules, limitJSON{Name: r.Name, Method: r.Method, Tier: r.Tier, Limit: r.Limit,
			Window: r.Window.String(), Algorithm: r.Algorithm, Burst: r.Burst})
	}
	for _, bad := range invalid {
		doc.Invalid = append(doc.Invalid, invalidJSON{Name: bad.Name, Value: bad.Raw, Error: bad.Err.Error()})
	}
	return writeJSON(out, doc)
}

// ---- set ----

// countFlag is a --limit or --burst value: a whole number of calls.
type countFlag struct {
	n       int64
	name    string
	example string
}

func (f *countFlag) String() string { return strconv.FormatInt(f.n, 10) }
func (f *countFlag) Type() string   { return "int" }

func (f *countFlag) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(strings.ReplaceAll(s, "_", "")), 10, 64)
	if err != nil || n < 1 {
		return fmt.Errorf("want a whole number of calls, at least 1, e.g. --%s %s", f.name, f.example)
	}
	f.n = n
	return nil
}

// windowFlag is a --window value: a Go duration.
type windowFlag struct{ d time.Duration }

func (f *windowFlag) String() string {
	if f.d == 0 {
		return ""
	}
	return f.d.String()
}
func (f *windowFlag) Type() string { return "duration" }

func (f *windowFlag) Set(s string) error {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d <= 0 {
		return errors.New("want a positive duration, e.g. --window 1s, 500ms or 1m")
	}
	f.d = d
	return nil
}

func newLimitsSetCommand() *cobra.Command {
	var rf redisFlags
	var timeout time.Duration
	var method, tier, algorithm string
	limit := countFlag{name: "limit", example: "100"}
	burst := countFlag{name: "burst", example: "20"}
	var window windowFlag
	const usage = "rpr limits set SERVICE RULE --limit N --window D, e.g. rpr limits set examples.orders.v1.Orders free --tier free --limit 10 --window 1s"
	cmd := &cobra.Command{
		Use:   "set SERVICE RULE --limit N --window D [--method M] [--tier T] [--algorithm log|gcra] [--burst B]",
		Short: "Add or replace a rate-limit rule",
		Long: `set stores the rule RULE of a service, replacing one of that name: each caller
of the tier may make LIMIT calls to the method per sliding WINDOW. Clients
apply it within a second. RULE is 1-64 letters, digits, '.', '_' or '-'.`,
		Example: `  rpr limits set examples.orders.v1.Orders free --tier free --limit 10 --window 1s
  rpr limits set examples.orders.v1.Orders search --method Search --limit 5 --window 1m
  rpr limits set examples.orders.v1.Orders vip --tier vip --limit 1000 --window 1s --algorithm gcra --burst 100`,
		Args:              usageArgs(2, 2, usage),
		ValidArgsFunction: completeServices(&rf, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkLimitsService(args[0], usage); err != nil {
				return err
			}
			flags := cmd.Flags()
			switch {
			case !flags.Changed("limit"):
				return badInput(errors.New("--limit is required: the calls each caller may make per window, e.g. --limit 100"))
			case !flags.Changed("window"):
				return badInput(errors.New("--window is required: the sliding window the limit counts over, e.g. --window 1s"))
			case algorithm != admin.LimitLog && algorithm != admin.LimitGCRA:
				return badInput(fmt.Errorf("--algorithm %q: want log (exact) or gcra (constant memory), e.g. --algorithm gcra", algorithm))
			}
			rule := admin.LimitRule{Name: args[1], Method: method, Tier: tier, Limit: limit.n, Window: window.d, Algorithm: algorithm, Burst: burst.n}
			if _, err := rule.Normalize(args[0]); err != nil {
				return limitFlagError(err)
			}
			ctx, a, done, err := rf.connect(cmd, timeout)
			if err != nil {
				return err
			}
			defer done()
			limits := a.Service(args[0]).Limits()
			before, _, err := limits.List(ctx)
			if err != nil {
				return badInput(err)
			}
			stored, err := limits.Set(ctx, rule)
			if err != nil {
				return badInput(err)
			}
			out := cmd.OutOrStdout()
			verb := "added"
			for _, old := range before {
				if old.Name == stored.Name {
					verb = "replaced (was: " + old.String() + ")"
				}
			}
			fmt.Fprintf(out, "%s %s: %s\n  %s; clients apply it within a second\n", args[0], stored.Name, stored, verb)
			if hint := unknownServiceHint(ctx, a, args[0]); hint != "" {
				fmt.Fprintf(out, "note: %s\n", hint)
			}
			return nil
		},
	}
	rf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&method, "method", "*", `method the rule applies to: its short name ("Search"), full name ("pkg.Svc/Search"), or * for all methods together`)
	f.StringVar(&tier, "tier", "*", "caller tier the rule applies to (x-rpr-tier; callers without one are \"normal\"), or * for every tier")
	f.Var(&limit, "limit", "calls each caller may make per window (required)")
	f.Var(&window, "window", "the sliding window: 1s, 500ms, 1m ... up to 24h (required)")
	f.StringVar(&algorithm, "algorithm", admin.LimitLog, "log (exact sliding log, memory grows with the limit) or gcra (constant memory, allows bursts)")
	f.Var(&burst, "burst", "gcra only: calls let through at once after a quiet spell (default: the limit)")
	f.DurationVar(&timeout, "timeout", 5*time.Second, "give up on Redis after this long")
	return cmd
}

// limitFlagError turns a rule error into exit status 2 naming the flag (or
// the RULE argument) at fault, with an example.
func limitFlagError(err error) error {
	var re *admin.LimitRuleError
	if !errors.As(err, &re) {
		return badInput(err)
	}
	if re.Field == "name" {
		return badInput(fmt.Errorf("rule name %q %s, e.g. %s", re.Value, re.Problem, re.Example))
	}
	return badInput(fmt.Errorf("--%s %s: %s, e.g. --%s %s", re.Field, re.Value, re.Problem, re.Field, re.Example))
}

// ---- rm ----

func newLimitsRmCommand() *cobra.Command {
	var rf redisFlags
	var timeout time.Duration
	const usage = "rpr limits rm SERVICE RULE, e.g. rpr limits rm examples.orders.v1.Orders free"
	cmd := &cobra.Command{
		Use:   "rm SERVICE RULE",
		Short: "Remove a rate-limit rule",
		Long: `rm deletes a rule; clients stop applying it within a second, and its
counters expire within a window. It exits 1 when the service has no such
rule.`,
		Example:           `  rpr limits rm examples.orders.v1.Orders free`,
		Args:              usageArgs(2, 2, usage),
		ValidArgsFunction: completeServices(&rf, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkLimitsService(args[0], usage); err != nil {
				return err
			}
			ctx, a, done, err := rf.connect(cmd, timeout)
			if err != nil {
				return err
			}
			defer done()
			limits := a.Service(args[0]).Limits()
			removed, err := limits.Remove(ctx, args[1])
			if err != nil {
				return badInput(err)
			}
			if !removed {
				rules, invalid, _ := limits.List(ctx)
				if len(rules) == 0 && len(invalid) == 0 {
					// Nothing set: perhaps a mistyped name.
					if err := requireService(ctx, a, rf.url, args[0]); err != nil {
						return err
					}
				}
				var names []string
				for _, r := range rules {
					names = append(names, r.Name)
				}
				for _, bad := range invalid {
					names = append(names, bad.Name)
				}
				has := "it has none"
				if len(names) > 0 {
					slices.Sort(names)
					has = "its rules: " + strings.Join(names, ", ")
				}
				return failed(fmt.Errorf("%s has no rate-limit rule %q (%s)", args[0], args[1], has))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: removed; clients stop applying it within a second\n", args[0], args[1])
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up on Redis after this long")
	return cmd
}
