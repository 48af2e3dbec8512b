package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	ordersv1 "github.com/rprtunnel/rpr/gen/examples/orders/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

func newDemoCommand() *cobra.Command {
	var redisURL string
	var verbose bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the example servers and a client in one process and show a few calls",
		Long: `demo starts the example Greeter and Orders servers and a client in this
process, all talking only through Redis, and makes three unary calls (one
that succeeds, one the server refuses with INVALID_ARGUMENT, one that runs
past its deadline) and two async ones (an order the server ships after the
client has moved on, and one it refuses for good, which lands in the
dead-letter queue).

Without --redis (or $RPR_REDIS_URL) it uses an embedded, in-memory Redis
(for the demo only; tests and production use a real redis-server).`,
		Example: `  rpr demo
  rpr demo --redis redis://127.0.0.1:6379/0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), redisURL, verbose)
		},
	}
	registerEmbeddedRedis(cmd, &redisURL)
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "show the server's and client's log lines")
	return cmd
}

func runDemo(ctx context.Context, out io.Writer, redisURL string, verbose bool) error {
	if redisURL == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("start embedded Redis: %w", err)
		}
		defer mr.Close()
		redisURL = "redis://" + mr.Addr() + "/0"
		fmt.Fprintf(out, "redis   embedded, in memory, at %s (pass --redis URL to use a real one)\n", mr.Addr())
	} else {
		fmt.Fprintf(out, "redis   %s\n", tunnel.RedactURL(redisURL))
	}

	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(out, nil))
	}

	// The server side: it reaches only Redis.
	serverRedis, err := tunnel.Open(ctx, redisURL)
	if err != nil {
		return badInput(err)
	}
	defer serverRedis.Close()
	srv, err := tunnel.NewServer(serverRedis, tunnel.ServerOptions{Logger: logger})
	if err != nil {
		return err
	}
	greeterv1.RegisterGreeterServer(srv, greeter.Server{})
	warehouse := &demoWarehouse{shipped: make(chan string, 4)}
	ordersv1.RegisterOrdersServer(srv, warehouse)
	serveCtx, stopServing := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serveCtx) }()
	defer func() {
		stopServing()
		<-served
	}()

	// The client side: its own connection to the same Redis, nothing else.
	clientRedis, err := tunnel.Open(ctx, redisURL)
	if err != nil {
		return badInput(err)
	}
	defer clientRedis.Close()
	client, err := tunnel.NewClient(clientRedis, tunnel.ClientOptions{BizCode: "DEMO", Logger: logger})
	if err != nil {
		return err
	}
	defer client.Close()
	greeterClient := greeterv1.NewGreeterClient(client)
	fmt.Fprintf(out, "server  worker %s serves %s and %s\n", srv.WorkerID(), greeterv1.Greeter_ServiceInfo.Name, ordersv1.Orders_ServiceInfo.Name)
	fmt.Fprintf(out, "client  %s\n\n", client.ID())

	if err := waitForServer(ctx, greeterClient); err != nil {
		return err
	}

	start := time.Now()
	reply, err := greeterClient.SayHello(ctx, &greeterv1.SayHelloRequest{Name: "Ada"})
	show(out, 1, `SayHello(name: "Ada")`, start, err, func() string { return fmt.Sprintf("OK %q", reply.GetMessage()) })

	start = time.Now()
	_, err = greeterClient.SayHello(ctx, &greeterv1.SayHelloRequest{})
	show(out, 2, `SayHello(name: "")`, start, err, nil)

	start = time.Now()
	callCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = greeterClient.SlowHello(callCtx, &greeterv1.SlowHelloRequest{Name: "Bob", DelayMs: 2000})
	cancel()
	show(out, 3, `SlowHello(delay: 2s) with a 300ms deadline`, start, err, nil)

	start = time.Now()
	counts, err := demoCountdown(ctx, greeterClient)
	show(out, 4, `Countdown(from: 3) a server stream`, start, err, func() string { return "OK " + counts })

	if err := demoAsync(ctx, out, clientRedis, client, warehouse); err != nil {
		return err
	}

	fmt.Fprintln(out, "\nEvery call went client -> Redis stream -> server; unary answers and the")
	fmt.Fprintln(out, "stream's messages came back through the client's response stream, async")
	fmt.Fprintln(out, "ones were only acknowledged.")
	fmt.Fprintln(out, "Next: the README's tutorial writes a service of your own.")
	return nil
}

// demoCountdown reads a short server stream, and says what arrived.
func demoCountdown(ctx context.Context, greeterClient greeterv1.GreeterClient) (string, error) {
	stream, err := greeterClient.Countdown(ctx, &greeterv1.CountdownRequest{From: 3, IntervalMs: 50})
	if err != nil {
		return "", err
	}
	var got []string
	for {
		reply, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return strings.Join(got, " ") + ", then the end of the stream", nil
		}
		if err != nil {
			return "", err
		}
		got = append(got, strconv.Itoa(int(reply.GetCount())))
	}
}

// demoAsync enqueues two orders: one the warehouse ships after the client
// has its receipt, one it refuses for good, which is dead-lettered.
func demoAsync(ctx context.Context, out io.Writer, rdb redis.UniversalClient, client *tunnel.Client, warehouse *demoWarehouse) error {
	orders := ordersv1.NewOrdersClient(client)
	// Order ids are idempotency keys, remembered for a day: fresh ones per
	// run, so the demo also works on a Redis that ran it before.
	run := time.Now().UnixMilli()
	first, second := fmt.Sprintf("ord-%d-1", run), fmt.Sprintf("ord-%d-2", run)
	start := time.Now()
	receipt, err := orders.ShipOrder(ctx, &ordersv1.ShipOrderRequest{OrderId: first, Sku: "BOOK-42", Quantity: 1},
		tunnel.WithIdempotencyKey(first))
	show(out, 5, `ShipOrder(`+first+`) async`, start, err, func() string { return "receipt " + receipt.RequestID })
	if err != nil {
		return err
	}
	select {
	case id := <-warehouse.shipped:
		fmt.Fprintf(out, "        the server shipped %s %v after the call was made\n", id, time.Since(start).Round(100*time.Microsecond))
	case <-time.After(10 * time.Second):
		return fmt.Errorf("the demo warehouse did not ship %s within 10s", first)
	}

	start = time.Now()
	receipt, err = orders.ShipOrder(ctx, &ordersv1.ShipOrderRequest{OrderId: second, Sku: "BOOK-42", Quantity: 0},
		tunnel.WithIdempotencyKey(second))
	show(out, 6, `ShipOrder(`+second+`, quantity 0) async`, start, err, func() string { return "receipt " + receipt.RequestID })
	if err != nil {
		return err
	}
	dlq := admin.New(rdb, admin.Options{}).Service(ordersv1.Orders_ServiceInfo.Name).DeadLetters()
	for deadline := time.Now().Add(10 * time.Second); ; {
		letters, err := dlq.List(ctx, admin.DeadLetterFilter{NewerThan: time.Minute}, 0)
		if err != nil {
			return err
		}
		for len(letters) > 0 && letters[0].Key != second {
			letters = letters[1:]
		}
		if len(letters) > 0 {
			fmt.Fprintf(out, "        the server refused it for good; it waits in the dead-letter queue: %s: %s\n", letters[0].Code, letters[0].Reason)
			fmt.Fprintf(out, "        (rpr dlq ls|show|replay|drop %s)\n", ordersv1.Orders_ServiceInfo.Name)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not reach the dead-letter queue within 10s", second)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// demoWarehouse ships the demo's orders, refusing those with no quantity.
type demoWarehouse struct {
	ordersv1.UnimplementedOrdersServer
	shipped chan string
}

func (w *demoWarehouse) ShipOrder(_ context.Context, in *ordersv1.ShipOrderRequest) error {
	if in.GetQuantity() <= 0 {
		return tunnel.Permanent(tunnel.Errorf(tunnel.InvalidArgument, "order %s: quantity %d must be positive", in.GetOrderId(), in.GetQuantity()))
	}
	select {
	case w.shipped <- in.GetOrderId():
	default:
	}
	return nil
}

// waitForServer waits until the client sees the server's heartbeat.
func waitForServer(ctx context.Context, c greeterv1.GreeterClient) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.SayHello(ctx, &greeterv1.SayHelloRequest{Name: "warm-up"})
		if tunnel.CodeOf(err) != tunnel.Unavailable {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the demo server did not come up: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// show prints one call's outcome on one line.
func show(out io.Writer, n int, what string, start time.Time, err error, okText func() string) {
	took := time.Since(start).Round(100 * time.Microsecond)
	if err == nil {
		fmt.Fprintf(out, "call %d  %-50s -> %s  (%v)\n", n, what, okText(), took)
		return
	}
	var e *tunnel.Error
	msg := err.Error()
	if errors.As(err, &e) {
		msg = e.Message()
	}
	fmt.Fprintf(out, "call %d  %-50s -> %s: %s  (%v)\n", n, what, tunnel.CodeOf(err), msg, took)
}
