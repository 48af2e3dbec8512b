package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/internal/logcapture"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestACLRolesOnShardedServiceInCluster runs a service sharded over three
// hash tags ({S}, {S#1}, {S#2}) on a real Redis Cluster under the users
// `rpr acl` prints, created on every node (Redis does not replicate ACL
// users): calls reach every shard, a call whose deadline passes in the
// queue is withdrawn, a stream runs, and no node refused anything.
func TestACLRolesOnShardedServiceInCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	for _, addr := range cl.Addrs() {
		node := cl.Node(addr).Client(t)
		createACLUser(t, node, "server", greeterService, "--user", "rpr-server", "--password-placeholder", "server-pw")
		createACLUser(t, node, "caller", greeterService, "--user", "rpr-caller", "--client-id", "shop-", "--password-placeholder", "caller-pw")
		if err := node.Do(ctx, "ACL", "LOG", "RESET").Err(); err != nil {
			t.Fatal(err)
		}
	}
	hosts := strings.Join(cl.Addrs(), ",")
	openClusterAs := func(user, password string) redis.UniversalClient {
		rdb, err := tunnel.Open(ctx, "redis://"+user+":"+password+"@"+hosts)
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}

	logs := &logcapture.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	impl := &aclGreeter{greeted: map[string]int{}, started: make(chan string, 4), ended: make(chan error, 4)}
	srv, err := tunnel.NewServer(openClusterAs("rpr-server", "server-pw"), tunnel.ServerOptions{
		WorkerID: "acl-cluster", Concurrency: 1, Shards: map[string]int{greeterService: 3}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	greeterv1.RegisterGreeterServer(srv, impl)
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	rootRDB := cl.Client(t)
	for deadline := time.Now().Add(15 * time.Second); ; {
		h, err := serviceOf(rootRDB, greeterService).Health(ctx)
		if err == nil && h.Serving() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became live: %v\n%s", greeterService, err, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}

	client, err := tunnel.NewClient(openClusterAs("rpr-caller", "caller-pw"), tunnel.ClientOptions{ID: "shop-c", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	greeterClient := greeterv1.NewGreeterClient(client)

	// Calls go to a shard at random: call until every shard's response
	// stream exists.
	shardTags := []string{"{" + greeterService + "}", "{" + greeterService + "#1}", "{" + greeterService + "#2}"}
	for i := 0; ; i++ {
		if _, err := greeterClient.SayHello(ctx, &greeterv1.SayHelloRequest{Name: "Ada"}); err != nil {
			t.Fatalf("SayHello %d: %v\n%s", i, err, logs)
		}
		all := true
		for _, tag := range shardTags {
			n, err := rootRDB.Exists(ctx, "rpr:v1:"+tag+":resp:shop-c").Result()
			if err != nil {
				t.Fatal(err)
			}
			all = all && n == 1
		}
		if all {
			break
		}
		if i == 200 {
			t.Fatalf("200 calls did not reach all of %v", shardTags)
		}
	}

	slow := make(chan error, 1)
	go func() {
		_, err := greeterClient.SlowHello(ctx, &greeterv1.SlowHelloRequest{Name: "blocker", DelayMs: 1500})
		slow <- err
	}()
	<-impl.started
	lctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = greeterClient.SayHello(lctx, &greeterv1.SayHelloRequest{Name: "late"})
	cancel()
	if tunnel.CodeOf(err) != tunnel.DeadlineExceeded || !tunnel.NotExecuted(err) {
		t.Fatalf("SayHello(late) = %v, want DEADLINE_EXCEEDED, not executed\n%s", err, logs)
	}
	if err := <-slow; err != nil {
		t.Fatalf("SlowHello(blocker): %v", err)
	}
	<-impl.ended

	// Open for over a second: the server checks its streams' callers (a
	// PTTL of each one's response stream) every second.
	cd, err := greeterClient.Countdown(ctx, &greeterv1.CountdownRequest{From: 2, IntervalMs: 1100})
	if err != nil {
		t.Fatalf("Countdown: %v", err)
	}
	for n := 0; ; n++ {
		_, err := cd.Recv()
		if errors.Is(err, io.EOF) && n == 2 {
			break
		}
		if err != nil {
			t.Fatalf("Countdown after %d messages: %v", n, err)
		}
	}
	if _, err := greeterClient.SayHello(ctx, &greeterv1.SayHelloRequest{Name: "after"}); err != nil {
		t.Fatalf("SayHello(after): %v", err)
	}
	if n := impl.count("late"); n != 0 {
		t.Fatalf("the request the arbiter withdrew ran %d times", n)
	}

	for _, addr := range cl.Addrs() {
		denials, err := cl.Node(addr).Client(t).Do(ctx, "ACL", "LOG").Slice()
		if err != nil {
			t.Fatal(err)
		}
		if len(denials) > 0 {
			t.Errorf("node %s refused %d commands rpr sent: %v", addr, len(denials), denials)
		}
	}
	if lines := logs.Lines("NOPERM"); len(lines) > 0 {
		t.Errorf("rpr logged refusals:\n%s", strings.Join(lines, "\n"))
	}
}
