package main

// The route tables a forwarding process (rpr ingress, rpr egress) reads:
// Redis's, watched, or a static file.

import (
	"context"
	"log/slog"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
)

// forwardTables are a process's two upstream tables and what keeps them
// current.
type forwardTables struct {
	http, grpc func() *upstream.Table
	watchers   []*upstream.Watcher
	source     string // for the start line
}

// openTables reads the tables from routesFile, or from Redis (watched,
// and reported as applied under worker when it is not empty).
func openTables(ctx context.Context, rdb redis.UniversalClient, prefix, routesFile, worker string, log *slog.Logger) (*forwardTables, error) {
	if routesFile != "" {
		h, g, err := upstream.ReadFile(routesFile)
		if err != nil {
			return nil, badInput(err)
		}
		return &forwardTables{
			http: func() *upstream.Table { return h }, grpc: func() *upstream.Table { return g },
			source: "static, from " + routesFile,
		}, nil
	}
	t := &forwardTables{source: "from Redis, applied within a second of rpr upstreams set"}
	for _, kind := range []upstream.Kind{upstream.HTTP, upstream.GRPC} {
		w := upstream.NewWatcher(upstream.NewStore(rdb, prefix, kind), worker, log)
		if err := w.Load(ctx); err != nil {
			return nil, err
		}
		t.watchers = append(t.watchers, w)
	}
	t.http, t.grpc = t.watchers[0].Table, t.watchers[1].Table
	return t, nil
}

// run keeps the tables current until ctx ends, on goroutines wg tracks.
func (t *forwardTables) run(ctx context.Context, wg *sync.WaitGroup) {
	for _, w := range t.watchers {
		wg.Go(func() { w.Run(ctx) })
	}
}
