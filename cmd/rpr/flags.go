package main

// The flags and argument checks the commands share: how a command reaches
// Redis, how a group of subcommands behaves, and usage errors.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

// redisFlags are the flags of every command that reads a deployment.
type redisFlags struct {
	url, prefix string
}

// The environment variables the --redis and --prefix flags of every
// command default to, so that a shell or a script names its deployment
// once.
const (
	envRedisURL = "RPR_REDIS_URL"
	envPrefix   = "RPR_PREFIX"
)

// defaultRedisURL is the Redis the commands that read a deployment reach
// when neither --redis nor $RPR_REDIS_URL names one.
const defaultRedisURL = "redis://127.0.0.1:6379/0"

// redisURLHelp is the help of every --redis flag.
const redisURLHelp = "Redis URL: redis://host:port/db, rediss:// (TLS; ?tls_ca=, ?tls_cert=&tls_key=), redis://h1:p1,h2:p2 (Cluster seed nodes) or redis+sentinel://h1:p1,h2:p2/master"

func (f *redisFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "redis", envOr(envRedisURL, defaultRedisURL), redisURLHelp+"; $"+envRedisURL+" sets the default")
	redactDefault(cmd)
	registerPrefix(cmd, &f.prefix)
}

// redactDefault shows the default of cmd's --redis flag in its help with
// the password masked: $RPR_REDIS_URL may hold one.
func redactDefault(cmd *cobra.Command) {
	if fl := cmd.Flags().Lookup("redis"); fl != nil && fl.DefValue != "" {
		fl.DefValue = tunnel.RedactURL(fl.DefValue)
	}
}

// registerPrefix adds the --prefix flag, defaulting to $RPR_PREFIX, else
// tunnel.DefaultPrefix.
func registerPrefix(cmd *cobra.Command, prefix *string) {
	cmd.Flags().StringVar(prefix, "prefix", envOr(envPrefix, tunnel.DefaultPrefix), "key prefix the services use; $"+envPrefix+" sets the default")
}

// registerEmbeddedRedis adds the --redis flag of a command that runs an
// embedded Redis of its own when none is named (demo, bench): it defaults
// to $RPR_REDIS_URL, else "" (embedded).
func registerEmbeddedRedis(cmd *cobra.Command, url *string) {
	cmd.Flags().StringVar(url, "redis", os.Getenv(envRedisURL), redisURLHelp+"; default $"+envRedisURL+", else an embedded in-memory Redis in this process (not representative)")
	redactDefault(cmd)
}

// envOr is the environment variable name, else def when it is unset or
// empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// open connects to the --redis URL. Failing to is exit status 2, as for
// every command: the command could not do its job at all.
func (f *redisFlags) open(ctx context.Context) (redis.UniversalClient, error) {
	rdb, err := tunnel.Open(ctx, f.url)
	if err != nil {
		return nil, badInput(err)
	}
	return rdb, nil
}

// handle returns the operator handle of the deployment the flags name, on
// rdb: the one admin.Client of a command run.
func (f *redisFlags) handle(rdb redis.UniversalClient) *admin.Client {
	return admin.New(rdb, admin.Options{Prefix: f.prefix})
}

// connect opens the --redis URL for one run of cmd, everything bounded by
// timeout, and returns the admin handle on it; done closes the connection
// and ends the context.
func (f *redisFlags) connect(cmd *cobra.Command, timeout time.Duration) (ctx context.Context, a *admin.Client, done func(), err error) {
	ctx, rdb, done, err := f.connectRedis(cmd, timeout)
	if err != nil {
		return nil, nil, nil, err
	}
	return ctx, f.handle(rdb), done, nil
}

// connectRedis is connect for commands that need the Redis client itself.
func (f *redisFlags) connectRedis(cmd *cobra.Command, timeout time.Duration) (context.Context, redis.UniversalClient, func(), error) {
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	rdb, err := f.open(ctx)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, rdb, func() { _ = rdb.Close(); cancel() }, nil
}

// commandGroup makes cmd a group of the subcommands subs (dlq, limits,
// routes, shards): run bare, it prints its help; with an unknown
// subcommand it fails with exit status 2, suggesting the nearest, else
// listing verbs; and bad flags of every subcommand are bad input, exit
// status 2 too.
func commandGroup(cmd *cobra.Command, verbs string, subs ...*cobra.Command) *cobra.Command {
	path := "rpr " + cmd.Name()
	cmd.Args = cobra.ArbitraryArgs
	cmd.SuggestionsMinimumDistance = 2
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		hint := verbs
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			hint = "did you mean " + strings.Join(s, " or ") + "?"
		}
		return badInput(fmt.Errorf("unknown command %q for %q: %s (%s --help)", args[0], path, hint, path))
	}
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return badInput(fmt.Errorf("%w (see %s --help)", err, c.CommandPath()))
	})
	cmd.AddCommand(subs...)
	return cmd
}

// usageArgs checks the number of arguments (max -1: no limit), with usage
// in the message and exit status 2.
func usageArgs(minArgs, maxArgs int, usage string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < minArgs || (maxArgs >= 0 && len(args) > maxArgs) {
			return badInput(fmt.Errorf("usage: %s", usage))
		}
		return nil
	}
}
