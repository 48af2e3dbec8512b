// Command server runs the example Greeter service. Start it on a host that
// can reach Redis; callers on any other network that reaches the same Redis
// can then call it.
//
//	go run ./examples/greeter/server --redis redis://10.0.0.5:6379/0
//
// With --lane v2 it serves only the calls the routing table sends to lane
// v2 (see `rpr routes` and examples/gray-release).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

func main() {
	redisURL := flag.String("redis", "redis://127.0.0.1:6379/0", "Redis URL: redis://host:port/db, a Cluster seed list redis://h1:p1,h2:p2, or redis+sentinel://h1:p1,h2:p2/master")
	concurrency := flag.Int("concurrency", 64, "handlers running at once")
	lane := flag.String("lane", tunnel.DefaultLane, "the lane to serve (see `rpr routes`)")
	flag.Parse()
	if err := run(*redisURL, *concurrency, *lane); err != nil {
		fmt.Fprintln(os.Stderr, "greeter-server:", err)
		os.Exit(1)
	}
}

func run(redisURL string, concurrency int, lane string) error {
	// SIGINT/SIGTERM end Serve, which answers the calls in flight first.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rdb, err := tunnel.Open(ctx, redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()

	srv, err := tunnel.NewServer(rdb, tunnel.ServerOptions{
		Concurrency: concurrency,
		Lane:        lane,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		return err
	}
	greeterv1.RegisterGreeterServer(srv, greeter.Server{})
	return srv.Serve(ctx)
}
