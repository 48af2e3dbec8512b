package main

import (
	"context"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/tunnel"
)

// redisFlags are the flags of every command that reads a deployment.
type redisFlags struct {
	url, prefix string
}

func (f *redisFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "redis", "redis://127.0.0.1:6379/0", "Redis URL: redis://host:port/db, rediss:// (TLS), redis://h1:p1,h2:p2 (Cluster seed nodes) or redis+sentinel://h1:p1,h2:p2/master")
	cmd.Flags().StringVar(&f.prefix, "prefix", tunnel.DefaultPrefix, "key prefix the services use")
}

// open connects to the --redis URL. Failing to is exit status 2, as for
// every command: the command could not do its job at all.
func (f *redisFlags) open(ctx context.Context) (redis.UniversalClient, error) {
	rdb, err := tunnel.Open(ctx, f.url)
	if err != nil {
		return nil, exitError{code: 2, cause: err}
	}
	return rdb, nil
}
