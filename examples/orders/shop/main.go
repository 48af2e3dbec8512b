// Command shop enqueues orders for the warehouse and does not wait for them
// to ship: each call returns once the order is durably in Redis, whether or
// not a warehouse is running. Run it before, during or after the
// warehouse; nothing is lost in between.
//
//	go run ./examples/orders/shop --redis redis://10.0.0.5:6379/0 --orders 100
//
// Each order's id is its idempotency key, so running the shop twice with
// the same --first ships each order once. --bad adds an order with a bad
// quantity, which the warehouse refuses for good: see it with
// `rpr dlq ls examples.orders.v1.Orders`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	ordersv1 "github.com/rprtunnel/rpr/gen/examples/orders/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

func main() {
	redisURL := flag.String("redis", "redis://127.0.0.1:6379/0", "Redis URL: redis://host:port/db, a Cluster seed list redis://h1:p1,h2:p2, or redis+sentinel://h1:p1,h2:p2/master")
	orders := flag.Int("orders", 10, "how many orders to enqueue")
	first := flag.Int("first", 1, "number of the first order (order ids are ord-<n>)")
	bad := flag.Bool("bad", false, "also enqueue one order the warehouse will refuse (quantity 0)")
	delay := flag.Duration("delay", 0, "ship the orders this long from now instead of at once")
	flag.Parse()
	if *orders < 0 || *delay < 0 {
		fmt.Fprintln(os.Stderr, "shop: --orders and --delay must not be negative")
		os.Exit(2)
	}
	if err := run(*redisURL, *first, *orders, *bad, *delay); err != nil {
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(1)
	}
}

func run(redisURL string, first, n int, bad bool, delay time.Duration) error {
	ctx := context.Background()
	rdb, err := tunnel.Open(ctx, redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{})
	if err != nil {
		return err
	}
	defer client.Close()
	orders := ordersv1.NewOrdersClient(client)

	enqueue := func(req *ordersv1.ShipOrderRequest) error {
		for {
			receipt, err := orders.ShipOrder(ctx, req,
				tunnel.WithIdempotencyKey(req.GetOrderId()),
				tunnel.WithDelay(delay))
			if after, full := tunnel.RetryAfter(err); full && tunnel.CodeOf(err) == tunnel.ResourceExhausted {
				// The buffer is full: the warehouse is far behind. Wait as
				// told; nothing was enqueued.
				fmt.Printf("%s: queue full, retrying in %v\n", req.GetOrderId(), after)
				time.Sleep(after)
				continue
			}
			if err != nil {
				return err
			}
			fmt.Printf("%s queued as %s\n", req.GetOrderId(), receipt.RequestID)
			return nil
		}
	}
	for i := first; i < first+n; i++ {
		req := &ordersv1.ShipOrderRequest{OrderId: fmt.Sprintf("ord-%d", i), Sku: "BOOK-42", Quantity: 1, Address: "1 Example Street"}
		if err := enqueue(req); err != nil {
			return err
		}
	}
	if bad {
		if err := enqueue(&ordersv1.ShipOrderRequest{OrderId: fmt.Sprintf("ord-bad-%d", first), Sku: "BOOK-42", Quantity: 0}); err != nil {
			return err
		}
	}
	return nil
}
