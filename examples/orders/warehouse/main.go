// Command warehouse runs the example Orders service: it ships the orders the
// shop enqueued, at its own pace. Orders that fail for a passing reason are
// retried by rpr with backoff; orders that can never ship (a bad quantity)
// are dead-lettered at once, where `rpr dlq` shows them.
//
//	go run ./examples/orders/warehouse --redis redis://10.0.0.5:6379/0
//
// --fail-rate makes a share of attempts fail with UNAVAILABLE, to watch
// retries happen (`rpr stats` shows the RETRY column).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"syscall"

	ordersv1 "github.com/rprtunnel/rpr/gen/examples/orders/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

func main() {
	redisURL := flag.String("redis", "redis://127.0.0.1:6379/0", "Redis URL: redis://host:port/db, a Cluster seed list redis://h1:p1,h2:p2, or redis+sentinel://h1:p1,h2:p2/master")
	concurrency := flag.Int("concurrency", 16, "orders shipped at once")
	failRate := flag.Float64("fail-rate", 0, "share of attempts that fail with UNAVAILABLE (0 to 1), to see retries")
	flag.Parse()
	if *failRate < 0 || *failRate > 1 {
		fmt.Fprintln(os.Stderr, "warehouse: --fail-rate must be between 0 and 1, e.g. 0.2")
		os.Exit(2)
	}
	if err := run(*redisURL, *concurrency, *failRate); err != nil {
		fmt.Fprintln(os.Stderr, "warehouse:", err)
		os.Exit(1)
	}
}

func run(redisURL string, concurrency int, failRate float64) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rdb, err := tunnel.Open(ctx, redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	srv, err := tunnel.NewServer(rdb, tunnel.ServerOptions{Concurrency: concurrency, Logger: log})
	if err != nil {
		return err
	}
	ordersv1.RegisterOrdersServer(srv, &warehouse{log: log, failRate: failRate, shipped: map[string]bool{}})
	return srv.Serve(ctx)
}

// warehouse ships orders. It remembers what it shipped, as a real one would
// in its database, so shipping an order again does nothing.
type warehouse struct {
	ordersv1.UnimplementedOrdersServer
	log      *slog.Logger
	failRate float64

	mu      sync.Mutex
	shipped map[string]bool
}

func (w *warehouse) ShipOrder(ctx context.Context, in *ordersv1.ShipOrderRequest) error {
	if in.GetQuantity() <= 0 {
		// Retrying cannot fix the order itself: straight to the DLQ.
		return tunnel.Permanent(tunnel.Errorf(tunnel.InvalidArgument, "order %s: quantity %d must be positive", in.GetOrderId(), in.GetQuantity()))
	}
	if rand.Float64() < w.failRate {
		return tunnel.Errorf(tunnel.Unavailable, "order %s: the label printer is jammed", in.GetOrderId())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shipped[in.GetOrderId()] {
		return nil
	}
	w.shipped[in.GetOrderId()] = true
	w.log.Info("shipped", "order", in.GetOrderId(), "sku", in.GetSku(), "quantity", in.GetQuantity(),
		"attempt", tunnel.AttemptFromContext(ctx), "request_id", tunnel.RequestIDFromContext(ctx))
	return nil
}
