package main

// rpr run under exactly the ACL users `rpr acl` prints: a server user and a
// caller user made from the printed lines, a server and a client
// connected as them, every kind of call, and the refusals the caller's
// rules promise.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	ordersv1 "github.com/rprtunnel/rpr/gen/examples/orders/v1"
	"github.com/rprtunnel/rpr/internal/logcapture"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// aclGreeter is the example Greeter, recording which names it greeted and
// telling the test when a SlowHello starts and how it ended.
type aclGreeter struct {
	greeter.Server
	mu      sync.Mutex
	greeted map[string]int
	started chan string
	ended   chan error
}

func (g *aclGreeter) SayHello(ctx context.Context, req *greeterv1.SayHelloRequest) (*greeterv1.SayHelloResponse, error) {
	g.mu.Lock()
	g.greeted[req.GetName()]++
	g.mu.Unlock()
	return g.Server.SayHello(ctx, req)
}

func (g *aclGreeter) SlowHello(ctx context.Context, req *greeterv1.SlowHelloRequest) (*greeterv1.SlowHelloResponse, error) {
	g.started <- req.GetName()
	resp, err := g.Server.SlowHello(ctx, req)
	g.ended <- ctx.Err()
	return resp, err
}

func (g *aclGreeter) count(name string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.greeted[name]
}

// aclOrders records the orders it shipped.
type aclOrders struct {
	ordersv1.UnimplementedOrdersServer
	shipped chan string
}

func (o *aclOrders) ShipOrder(_ context.Context, req *ordersv1.ShipOrderRequest) error {
	o.shipped <- req.GetOrderId()
	return nil
}

// splitCommand splits a line `rpr acl` printed into its arguments, as
// redis-cli does for these lines: words apart, "..." one argument.
func splitCommand(t *testing.T, line string) []any {
	t.Helper()
	var args []any
	for line = strings.TrimSpace(line); line != ""; line = strings.TrimSpace(line) {
		end := strings.IndexByte(line, ' ')
		if line[0] == '"' {
			end = strings.IndexByte(line[1:], '"') + 2
			if end == 1 {
				t.Fatalf("unterminated quote in %q", line)
			}
			args = append(args, line[1:end-1])
		} else {
			if end < 0 {
				end = len(line)
			}
			args = append(args, line[:end])
		}
		line = line[end:]
	}
	return args
}

// createACLUser runs `rpr acl ARGS...` and sends the line it printed to
// rdb, as an operator pasting it into redis-cli would.
func createACLUser(t *testing.T, rdb redis.UniversalClient, args ...string) {
	t.Helper()
	res := runCLI(t, "", append([]string{"acl"}, args...)...)
	if res.code != 0 || res.stderr != "" || strings.Count(res.stdout, "\n") != 1 {
		t.Fatalf("rpr acl %v: %v", args, res)
	}
	if err := rdb.Do(context.Background(), splitCommand(t, res.stdout)...).Err(); err != nil {
		t.Fatalf("the line rpr acl %v printed: %v\n%s", args, err, res.stdout)
	}
}

// openAs connects to rs as an ACL user.
func openAs(t *testing.T, rs *redistest.Server, user, password string) redis.UniversalClient {
	t.Helper()
	rdb, err := tunnel.Open(context.Background(), "redis://"+user+":"+password+"@"+rs.Addr()+"/0")
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestACLRolesRunUnderPrintedRules(t *testing.T) {
	rs := redistest.Start(t)
	root := rs.Client(t)
	ctx := context.Background()
	createACLUser(t, root, "server", greeterService, ordersService, "--user", "rpr-server", "--password-placeholder", "server-pw")
	createACLUser(t, root, "caller", greeterService, ordersService, "--user", "rpr-caller", "--client-id", "shop-", "--password-placeholder", "caller-pw")
	if err := root.Do(ctx, "ACL", "LOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	// Rate limits of both algorithms, so the caller runs the limit script.
	for _, args := range [][]string{
		{greeterService, "hello", "--method", "SayHello", "--limit", "1000", "--window", "1s"},
		{ordersService, "orders", "--limit", "2", "--window", "1h", "--algorithm", "gcra"},
	} {
		if res := runCLI(t, "", append([]string{"limits", "set", "--redis", rs.URL()}, args...)...); res.code != 0 {
			t.Fatalf("rpr limits set %v: %v", args, res)
		}
	}

	logs := &logcapture.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	serverRDB := openAs(t, rs, "rpr-server", "server-pw")
	// One handler at a time for the Greeter, so a call made while a
	// SlowHello runs waits in the queue, undelivered.
	greeterImpl := &aclGreeter{greeted: map[string]int{}, started: make(chan string, 4), ended: make(chan error, 4)}
	greeterSrv, err := tunnel.NewServer(serverRDB, tunnel.ServerOptions{WorkerID: "acl-greeter", Concurrency: 1, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	greeterv1.RegisterGreeterServer(greeterSrv, greeterImpl)
	serve(t, rs, greeterSrv, greeterService)
	// A second lane, which the caller picks with WithLane.
	laneSrv, err := tunnel.NewServer(serverRDB, tunnel.ServerOptions{WorkerID: "acl-greeter-v2", Lane: "v2", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	greeterv1.RegisterGreeterServer(laneSrv, greeterImpl)
	serve(t, rs, laneSrv, greeterService)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if h, err := serviceOf(root, greeterService).Health(ctx); err == nil && h.ServingLane("v2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lane v2 never became live")
		}
	}
	ordersImpl := &aclOrders{shipped: make(chan string, 4)}
	ordersSrv, err := tunnel.NewServer(serverRDB, tunnel.ServerOptions{WorkerID: "acl-orders", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ordersv1.RegisterOrdersServer(ordersSrv, ordersImpl)
	serve(t, rs, ordersSrv, ordersService)

	callerRDB := openAs(t, rs, "rpr-caller", "caller-pw")
	client, err := tunnel.NewClient(callerRDB, tunnel.ClientOptions{ID: "shop-1", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	greeterClient := greeterv1.NewGreeterClient(client)
	ordersClient := ordersv1.NewOrdersClient(client)

	t.Run("unary", func(t *testing.T) {
		for _, name := range []string{"Ada", "Bo", "Cy"} {
			reply, err := greeterClient.SayHello(ctx, &greeterv1.SayHelloRequest{Name: name})
			if err != nil || reply.GetMessage() != "Hello, "+name+"!" {
				t.Fatalf("SayHello(%s) = %v, %v", name, reply, err)
			}
		}
	})
	t.Run("lane", func(t *testing.T) {
		if _, err := greeterClient.SayHello(ctx, &greeterv1.SayHelloRequest{Name: "Lane"}, tunnel.WithLane("v2")); err != nil {
			t.Fatalf("SayHello in lane v2: %v", err)
		}
	})
	t.Run("async, delayed, rate limited", func(t *testing.T) {
		order := func(id string, opts ...tunnel.CallOption) error {
			_, err := ordersClient.ShipOrder(ctx, &ordersv1.ShipOrderRequest{OrderId: id, Sku: "SKU-1", Quantity: 1, Address: "x"}, opts...)
			return err
		}
		if err := order("o-1"); err != nil {
			t.Fatalf("ShipOrder(o-1): %v", err)
		}
		if err := order("o-2", tunnel.WithDelay(100*time.Millisecond)); err != nil {
			t.Fatalf("ShipOrder(o-2) delayed: %v", err)
		}
		// The rule allows two an hour: the third is refused before Redis.
		if err := order("o-3"); tunnel.CodeOf(err) != tunnel.ResourceExhausted || !tunnel.NotExecuted(err) {
			t.Fatalf("ShipOrder(o-3) = %v, want RESOURCE_EXHAUSTED by the rate limit", err)
		}
		shipped := map[string]bool{}
		for len(shipped) < 2 {
			select {
			case id := <-ordersImpl.shipped:
				shipped[id] = true
			case <-time.After(10 * time.Second):
				t.Fatalf("shipped only %v, want o-1 and o-2", shipped)
			}
		}
		if !shipped["o-1"] || !shipped["o-2"] {
			t.Fatalf("shipped %v, want o-1 and o-2", shipped)
		}
	})
	t.Run("deadline passed in the queue is not executed", func(t *testing.T) {
		slow := make(chan error, 1)
		go func() {
			_, err := greeterClient.SlowHello(ctx, &greeterv1.SlowHelloRequest{Name: "blocker", DelayMs: 1500})
			slow <- err
		}()
		<-greeterImpl.started
		lctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := greeterClient.SayHello(lctx, &greeterv1.SayHelloRequest{Name: "late"})
		cancel()
		if tunnel.CodeOf(err) != tunnel.DeadlineExceeded || !tunnel.NotExecuted(err) || !strings.Contains(err.Error(), "waited in the queue") {
			t.Fatalf("SayHello(late) = %v, want DEADLINE_EXCEEDED, not executed (withdrawn from the queue)", err)
		}
		if err := <-slow; err != nil {
			t.Fatalf("SlowHello(blocker): %v", err)
		}
		<-greeterImpl.ended
		if _, err := greeterClient.SayHello(ctx, &greeterv1.SayHelloRequest{Name: "after"}); err != nil {
			t.Fatalf("SayHello(after): %v", err)
		}
		if n := greeterImpl.count("late"); n != 0 {
			t.Fatalf("the request the arbiter withdrew ran %d times", n)
		}
	})
	t.Run("cancel reaches the running handler", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := greeterClient.SlowHello(cctx, &greeterv1.SlowHelloRequest{Name: "cancelled", DelayMs: 20000})
			done <- err
		}()
		<-greeterImpl.started
		cancel()
		if err := <-done; tunnel.CodeOf(err) != tunnel.Canceled || tunnel.NotExecuted(err) {
			t.Fatalf("SlowHello(cancelled) = %v, want CANCELED, may have executed", err)
		}
		select {
		case err := <-greeterImpl.ended:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("the handler ended with %v, want its context cancelled", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("the handler was never cancelled")
		}
	})
	t.Run("streams", func(t *testing.T) {
		// Open for over a second: the server checks its streams' callers
		// (a PTTL of each one's response stream) every second.
		cd, err := greeterClient.Countdown(ctx, &greeterv1.CountdownRequest{From: 3, IntervalMs: 600})
		if err != nil {
			t.Fatalf("Countdown: %v", err)
		}
		var got []uint32
		for {
			msg, err := cd.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("Countdown after %v: %v", got, err)
			}
			got = append(got, msg.GetCount())
		}
		if len(got) != 3 || got[0] != 3 || got[2] != 1 {
			t.Fatalf("Countdown sent %v, want [3 2 1]", got)
		}
		chat, err := greeterClient.Chat(ctx)
		if err != nil {
			t.Fatalf("Chat: %v", err)
		}
		for _, text := range []string{"one", "two"} {
			if err := chat.Send(&greeterv1.ChatRequest{Text: text}); err != nil {
				t.Fatalf("Chat send %s: %v", text, err)
			}
			reply, err := chat.Recv()
			if err != nil || reply.GetText() != "Hello, "+text+"!" {
				t.Fatalf("Chat reply to %s: %v, %v", text, reply, err)
			}
		}
		if err := chat.CloseSend(); err != nil {
			t.Fatalf("Chat CloseSend: %v", err)
		}
		if _, err := chat.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("Chat after CloseSend: %v, want io.EOF", err)
		}
	})
	if t.Failed() {
		t.Fatalf("logs:\n%s", logs)
	}

	// Nothing rpr did was refused: Redis logged no denial, and neither did rpr.
	denials, err := root.Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(denials) > 0 {
		t.Fatalf("Redis refused %d commands rpr sent: %v\nlogs:\n%s", len(denials), denials, logs)
	}
	if lines := logs.Lines("NOPERM"); len(lines) > 0 {
		t.Fatalf("rpr logged refusals:\n%s", strings.Join(lines, "\n"))
	}
	if lines := logs.Lines("refuses INFO"); len(lines) > 0 {
		t.Fatalf("the caller cannot read the master's term:\n%s", strings.Join(lines, "\n"))
	}

	checkACLRefusals(t, callerRDB, serverRDB)
}

// checkACLRefusals checks what the caller's and the server's users may
// not do.
func checkACLRefusals(t *testing.T, caller, server redis.UniversalClient) {
	ctx := context.Background()
	const (
		tag   = "rpr:v1:{" + greeterService + "}"
		other = "rpr:v1:{acme.billing.v1.Billing}"
	)
	refused := func(who string, rdb redis.UniversalClient, args ...any) {
		t.Helper()
		err := rdb.Do(ctx, args...).Err()
		if err == nil || !strings.Contains(err.Error(), "NOPERM") && !strings.Contains(err.Error(), "can't access") {
			t.Errorf("%s %v: %v, want NOPERM", who, args, err)
		}
	}
	for _, args := range [][]any{
		{"XRANGE", tag + ":req", "-", "+"},                                      // read requests
		{"XREAD", "STREAMS", tag + ":req", "0"},                                 // read requests
		{"XREADGROUP", "GROUP", "workers", "spy", "STREAMS", tag + ":req", ">"}, // join the workers group
		{"XAUTOCLAIM", tag + ":req", "workers", "spy", "0", "0-0"},              // steal from workers
		{"XINFO", "STREAM", tag + ":req", "FULL"},
		{"XGROUP", "CREATE", tag + ":req", "spies", "0"},
		{"EVAL", "return redis.call('XRANGE', KEYS[1], '-', '+')", "1", tag + ":st:x"}, // through a script
		{"HSET", tag + ":workers", "spy", "{}"},                                        // fake a heartbeat
		{"HSET", tag + ":routes", tag + "/*", "[]"},                                    // change routes
		{"HSET", tag + ":limits", "free", "{}"},                                        // change limits
		{"SET", tag + ":shards", "64"},                                                 // change the shard count
		{"PUBLISH", tag + ":routes:changed", "x"},
		{"XRANGE", tag + ":resp:other-1", "-", "+"}, // another client's answers
		{"XADD", tag + ":resp:other-1", "*", "e", "forged"},
		{"XLEN", other + ":req"}, // another service
		{"XADD", other + ":req", "*", "e", "x"},
		{"HGETALL", other + ":workers"},
		{"SCAN", "0"},
		{"KEYS", "*"},
	} {
		refused("caller", caller, args...)
	}
	for _, args := range [][]any{
		{"HSET", tag + ":routes", tag + "/*", "[]"},
		{"HSET", tag + ":limits", "free", "{}"},
		{"XRANGE", tag + ":resp:shop-1", "-", "+"}, // a caller's answers
		{"XLEN", other + ":req"},
		{"HSET", other + ":workers", "spy", "{}"},
	} {
		refused("server", server, args...)
	}
}
