package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/internal/logcapture"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestCallerWithoutInfoKeepsNotExecuted runs a caller whose ACL user was
// made before callers were granted INFO's server and replication
// sections: it cannot see a failover, so it settles a request the
// arbiter withdrew as not executed, as it did before, and says once in
// its log what it cannot tell and which rules grant it.
func TestCallerWithoutInfoKeepsNotExecuted(t *testing.T) {
	rs := redistest.Start(t)
	root := rs.Client(t)
	ctx := context.Background()
	createACLUser(t, root, "caller", greeterService, "--user", "rpr-caller", "--password-placeholder", "caller-pw")
	if err := root.Do(ctx, "ACL", "SETUSER", "rpr-caller", "-info").Err(); err != nil {
		t.Fatal(err)
	}

	greeter := &aclGreeter{greeted: map[string]int{}, started: make(chan string, 4), ended: make(chan error, 4)}
	srv, err := tunnel.NewServer(rs.Client(t), tunnel.ServerOptions{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	greeterv1.RegisterGreeterServer(srv, greeter)
	serve(t, rs, srv, greeterService)

	logs := &logcapture.Buffer{}
	client, err := tunnel.NewClient(openAs(t, rs, "rpr-caller", "caller-pw"), tunnel.ClientOptions{
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	greeterClient := greeterv1.NewGreeterClient(client)

	slow := make(chan error, 1)
	go func() {
		_, err := greeterClient.SlowHello(ctx, &greeterv1.SlowHelloRequest{Name: "blocker", DelayMs: 1500})
		slow <- err
	}()
	<-greeter.started
	lctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = greeterClient.SayHello(lctx, &greeterv1.SayHelloRequest{Name: "late"})
	cancel()
	if tunnel.CodeOf(err) != tunnel.DeadlineExceeded || !tunnel.NotExecuted(err) {
		t.Fatalf("SayHello(late) = %v, want DEADLINE_EXCEEDED, not executed", err)
	}
	if err := <-slow; err != nil {
		t.Fatalf("SlowHello(blocker): %v", err)
	}
	if lines := logs.Lines("refuses INFO"); len(lines) != 1 || !strings.Contains(lines[0], "+info|server and +info|replication") {
		t.Errorf("the client logged %d warnings of INFO refused, want one naming the rules that grant it:\n%s", len(lines), logs)
	}
	if n := greeter.count("late"); n != 0 {
		t.Errorf("the request the arbiter withdrew ran %d times", n)
	}
}
