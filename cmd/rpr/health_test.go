package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

func TestHealthExitStatus(t *testing.T) {
	rs := redistest.Start(t)
	const svc = "examples.greeter.v1.Greeter"

	out, code := runRPR(t, "health", "--redis", rs.URL(), svc)
	if code != 1 || !strings.Contains(out, "unknown service "+svc+"; no service is known") {
		t.Fatalf("no server ever: exit %d, output %q; want 1 and unknown service", code, out)
	}

	srv, err := tunnel.NewServer(rs.Client(t), tunnel.ServerOptions{WorkerID: "probe-target", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	greeterv1.RegisterGreeterServer(srv, greeter.Server{})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, code = runRPR(t, "health", "--redis", rs.URL(), svc)
		if code == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != 0 || !strings.Contains(out, "SERVING") || !strings.Contains(out, "probe-target") {
		t.Fatalf("serving: exit %d, output %q; want 0 naming the worker", code, out)
	}

	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if out, code = runRPR(t, "health", "--redis", rs.URL(), svc); code != 1 {
		t.Fatalf("after shutdown: exit %d, output %q; want 1", code, out)
	}

	if out, code = runRPR(t, "health", "--redis", "redis://127.0.0.1:1/0", "--timeout", "1s", svc); code != 2 {
		t.Fatalf("unreachable Redis: exit %d, output %q; want 2", code, out)
	}
}
