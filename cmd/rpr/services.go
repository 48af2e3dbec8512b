package main

// What several commands know about the service an argument names: whether
// it can be a service name at all, whether Redis knows it, its methods in
// the published schema, and shell completion of services, methods and
// lanes.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

// checkServiceName refuses a SERVICE argument that cannot be a service
// name; example is a command line to show instead.
func checkServiceName(arg, example string) error {
	switch {
	case arg == "":
		return badInput(fmt.Errorf("name the service, e.g. %s", example))
	case strings.Contains(arg, "/"):
		svc, _, _ := strings.Cut(arg, "/")
		return badInput(fmt.Errorf("%q names a method; this command takes the service: %s", arg, svc))
	case strings.ContainsAny(arg, "{}*# \t:") || strings.HasPrefix(arg, ".") || strings.HasSuffix(arg, "."):
		return badInput(fmt.Errorf("%q is not a service name; write pkg.Service, e.g. examples.greeter.v1.Greeter", arg))
	}
	return nil
}

// completionTimeout bounds the Redis reads of a shell completion: a
// completion that hangs is worse than none.
const completionTimeout = 2 * time.Second

// completeServices completes a SERVICE argument from the services known
// under the prefix, for the first maxArgs arguments (-1: every one).
func completeServices(rf *redisFlags, maxArgs int) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if maxArgs >= 0 && len(args) >= maxArgs {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, a, done, err := rf.connect(cmd, completionTimeout)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer done()
		names, _ := a.Services(ctx)
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
		ctx, a, done, err := rf.connect(cmd, completionTimeout)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer done()
		lanes, _ := a.Service(args[0]).Lanes(ctx)
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
		ctx, a, done, err := rf.connect(cmd, completionTimeout)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer done()
		svc, _, typed := strings.Cut(toComplete, "/")
		if !typed {
			names, _ := a.Services(ctx)
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
		for _, m := range schemaMethods(ctx, a.Service(svc)) {
			out = append(out, svc+"/"+m)
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// schemaMethods returns the method names of svc in the schema its servers
// published; nil when there is none.
func schemaMethods(ctx context.Context, svc *admin.Service) []string {
	sd, err := svc.Schema(ctx)
	if err != nil {
		return nil
	}
	return methodNames(sd)
}

// methodHint says, when svc published a schema and it has no method named
// method, that the name may be wrong; "" otherwise.
func methodHint(ctx context.Context, svc *admin.Service, method string) string {
	if method == "*" {
		return ""
	}
	methods := schemaMethods(ctx, svc)
	if len(methods) == 0 || slices.Contains(methods, method) {
		return ""
	}
	return fmt.Sprintf("%s has no method %s in the schema its servers published (its methods: %s): check the name", svc.Name(), method, strings.Join(methods, ", "))
}

// unknownServiceHint says, when service is not known under the handle's
// prefix, that its name may be wrong, in the words of unknownService; ""
// otherwise. Commands that change a service's settings note it and go on
// (a setting may be made before the service's first server starts).
func unknownServiceHint(ctx context.Context, a *admin.Client, service string) string {
	names, err := a.Services(ctx)
	if err != nil || slices.Contains(names, service) {
		return ""
	}
	return unknownService(a, "", service, names).Error()
}

// requireService fails when service is not known under the prefix of a
// (no published schema, no worker heartbeats): exit status 1, with the
// services that are known (unknownService). Redis that cannot be read is
// exit status 2. url is the --redis URL, named when no service is known.
func requireService(ctx context.Context, a *admin.Client, url, service string) error {
	names, err := a.Services(ctx)
	if err != nil {
		return badInput(err)
	}
	if slices.Contains(names, service) {
		return nil
	}
	return failed(unknownService(a, url, service, names))
}

// requireServiceOrData is requireService for the commands that show what
// a service left in Redis (stats, top): a service Redis knows no worker or
// schema of passes while its queues hold requests or dead letters.
func requireServiceOrData(ctx context.Context, a *admin.Client, url, service string) error {
	err := requireService(ctx, a, url, service)
	var exit exitError
	if err == nil || !errors.As(err, &exit) || exit.code != exitFailed {
		return err
	}
	lanes, statsErr := a.Service(service).LaneStats(ctx)
	if statsErr != nil {
		return badInput(statsErr)
	}
	for _, l := range lanes {
		if l.Length > 0 || l.Retrying > 0 || l.DeadLetters > 0 || l.Consumers > 0 {
			return nil
		}
	}
	return err
}

// unknownService is the one error of every command for a service name
// Redis does not know: "unknown service acme.Nope; known: a.B, c.D (rpr ls
// lists them)", or, when none is known, where rpr looked (the redacted
// URL, when url is not "", and the prefix).
func unknownService(a *admin.Client, url, service string, known []string) error {
	if len(known) > 0 {
		return fmt.Errorf("unknown service %s; known: %s (rpr ls lists them)", service, strings.Join(known, ", "))
	}
	where := fmt.Sprintf("under prefix %q", a.Prefix())
	if url != "" {
		where += " at " + tunnel.RedactURL(url)
	}
	return fmt.Errorf("unknown service %s; no service is known %s (servers publish themselves when they start: check --redis and --prefix)", service, where)
}
