package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

func newDemoCommand() *cobra.Command {
	var redisURL string
	var verbose bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the greeter server and a client in one process and show a few calls",
		Long: `demo starts the example Greeter server and a client in this process, both
talking only through Redis, and makes three calls: one that succeeds, one
the server refuses with INVALID_ARGUMENT, and one that runs past its
deadline.

Without --redis it uses an embedded, in-memory Redis (for the demo only;
tests and production use a real redis-server).`,
		Example: `  rpr demo
  rpr demo --redis redis://127.0.0.1:6379/0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), redisURL, verbose)
		},
	}
	cmd.Flags().StringVar(&redisURL, "redis", "", "Redis URL (redis:// or rediss://); default: an embedded Redis")
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
		fmt.Fprintf(out, "redis   %s\n", redisURL)
	}

	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(out, nil))
	}

	// The server side: it reaches only Redis.
	serverRedis, err := tunnel.Open(ctx, redisURL)
	if err != nil {
		return err
	}
	defer serverRedis.Close()
	srv, err := tunnel.NewServer(serverRedis, tunnel.ServerOptions{Logger: logger})
	if err != nil {
		return err
	}
	greeterv1.RegisterGreeterServer(srv, greeter.Server{})
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
		return err
	}
	defer clientRedis.Close()
	client, err := tunnel.NewClient(clientRedis, tunnel.ClientOptions{App: "DEMO", Logger: logger})
	if err != nil {
		return err
	}
	defer client.Close()
	greeterClient := greeterv1.NewGreeterClient(client)
	fmt.Fprintf(out, "server  worker %s serves %s\n", srv.WorkerID(), greeterv1.Greeter_ServiceDesc.ServiceName)
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

	fmt.Fprintln(out, "\nEvery call went client -> Redis stream -> server -> the client's response stream.")
	fmt.Fprintln(out, "Next: the README's tutorial writes a service of your own.")
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
		fmt.Fprintf(out, "call %d  %-45s -> %s  (%v)\n", n, what, okText(), took)
		return
	}
	var e *tunnel.Error
	msg := err.Error()
	if errors.As(err, &e) {
		msg = e.Message()
	}
	fmt.Fprintf(out, "call %d  %-45s -> %s: %s  (%v)\n", n, what, tunnel.CodeOf(err), msg, took)
}
