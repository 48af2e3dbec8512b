package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	ordersv1 "github.com/rprtunnel/rpr/gen/examples/orders/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

const ordersService = "examples.orders.v1.Orders"

// v2Greeter is the "new version" of the Greeter: it answers differently,
// so a test can tell which lane ran a call.
type v2Greeter struct{ greeter.Server }

func (v2Greeter) SayHello(_ context.Context, req *greeterv1.SayHelloRequest) (*greeterv1.SayHelloResponse, error) {
	return &greeterv1.SayHelloResponse{Message: "v2 says hi to " + req.GetName()}, nil
}

// countingWarehouse ships orders, counting them, each after release is
// closed (nil: at once).
type countingWarehouse struct {
	ordersv1.UnimplementedOrdersServer
	release chan struct{}
	mu      sync.Mutex
	shipped map[string]int
}

func (w *countingWarehouse) ShipOrder(ctx context.Context, in *ordersv1.ShipOrderRequest) error {
	if w.release != nil {
		select {
		case <-w.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.shipped[in.GetOrderId()]++
	return nil
}

func (w *countingWarehouse) count() (orders, runs int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.shipped {
		runs += n
	}
	return len(w.shipped), runs
}

// startLaneServer serves register's services in lane ("" for the default
// one) until the test ends or stop is called, and returns once service has
// a live server in the lane.
func startLaneServer(t *testing.T, rs *redistest.Server, service, lane string, concurrency int, register func(*tunnel.Server)) (stop func()) {
	t.Helper()
	srv, err := tunnel.NewServer(rs.Client(t), tunnel.ServerOptions{Lane: lane, Concurrency: concurrency, Logger: slog.New(slog.DiscardHandler), RetryPollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	register(srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve in lane %q: %v", lane, err)
			}
		})
	}
	t.Cleanup(stop)
	if lane == "" {
		lane = tunnel.DefaultLane
	}
	waitUntil(t, "a live server in lane "+lane, func() bool { return laneOf(t, rs, service, lane).LiveWorkers > 0 })
	return stop
}

func laneOf(t *testing.T, rs *redistest.Server, service, lane string) admin.LaneStatus {
	t.Helper()
	lanes, err := serviceOf(rs.Client(t), service).Lanes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st, _ := laneStatus(lanes, lane)
	return st
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func routes(t *testing.T, rs *redistest.Server, verb string, args ...string) rprRun {
	t.Helper()
	return runCLI(t, "", append([]string{"routes", verb, "--redis", rs.URL()}, args...)...)
}

// TestRoutesSetLsTestRm: what set writes is what ls and test show and
// what clients apply; rm takes it back.
func TestRoutesSetLsTestRm(t *testing.T) {
	rs := redistest.Start(t)
	startLaneServer(t, rs, greeterService, "v1", 0, func(s *tunnel.Server) { greeterv1.RegisterGreeterServer(s, greeter.Server{}) })
	startLaneServer(t, rs, greeterService, "v2", 0, func(s *tunnel.Server) { greeterv1.RegisterGreeterServer(s, v2Greeter{}) })
	all := greeterService + "/*"

	res := routes(t, rs, "ls", greeterService)
	if res.code != 0 || !strings.Contains(res.stdout, "has no routes: every call goes to the default lane") {
		t.Fatalf("ls of an empty table: %v", res)
	}

	res = routes(t, rs, "set", all, "x-canary=true => v2", "v1:90,v2:10")
	if res.code != 0 || !strings.Contains(res.stdout, all+": 'x-canary=true => v2' v1:90,v2:10\n  added") || strings.Contains(res.stderr, "warning") {
		t.Fatalf("set: %v", res)
	}
	res = routes(t, rs, "set", greeterService+"/SlowHello", "v1")
	if res.code != 0 {
		t.Fatalf("set SlowHello: %v", res)
	}

	// What the CLI stored is what the library reads.
	table, err := serviceOf(rs.Client(t), greeterService).Routes().List(context.Background())
	if err != nil || len(table) != 2 || table[1].Pattern != all || len(table[1].Rules) != 2 || table[1].Rules[1].String() != "v1:90,v2:10" {
		t.Fatalf("List = %+v, %v", table, err)
	}

	res = routes(t, rs, "ls", greeterService)
	if res.code != 0 {
		t.Fatalf("ls: %v", res)
	}
	for _, line := range []string{
		"PATTERN                                #  RULE",
		"examples.greeter.v1.Greeter/SlowHello  1  v1",
		"examples.greeter.v1.Greeter/*          1  x-canary=true => v2",
		"                                       2  v1:90,v2:10",
		"LANE     ROUTED  LIVE SERVERS  QUEUED",
		"default  yes     0             0",
		"v1       yes     1             0",
		"v2       yes     1             0",
	} {
		if !strings.Contains(res.stdout, line+"\n") {
			t.Errorf("ls lacks %q:\n%s", line, res.stdout)
		}
	}

	res = routes(t, rs, "ls", greeterService, "-o", "json")
	var doc struct {
		Service string `json:"service"`
		Routes  []struct {
			Pattern string `json:"pattern"`
			Rules   []struct {
				Spec  string            `json:"spec"`
				Match map[string]string `json:"match"`
				Lanes []struct {
					Lane   string `json:"lane"`
					Weight int    `json:"weight"`
				} `json:"lanes"`
			} `json:"rules"`
		} `json:"routes"`
		Lanes []struct {
			Lane        string `json:"lane"`
			Routed      bool   `json:"routed"`
			LiveServers int    `json:"live_servers"`
			Queued      int64  `json:"queued"`
		} `json:"lanes"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &doc); err != nil {
		t.Fatalf("ls -o json is not JSON: %v\n%v", err, res)
	}
	if doc.Service != greeterService || len(doc.Routes) != 2 || doc.Routes[1].Rules[0].Spec != "x-canary=true => v2" ||
		doc.Routes[1].Rules[0].Match["x-canary"] != "true" || doc.Routes[1].Rules[1].Lanes[1].Lane != "v2" || doc.Routes[1].Rules[1].Lanes[1].Weight != 10 ||
		len(doc.Lanes) != 3 || doc.Lanes[2].Lane != "v2" || !doc.Lanes[2].Routed || doc.Lanes[2].LiveServers != 1 {
		t.Errorf("ls -o json: %+v", doc)
	}

	res = routes(t, rs, "test", greeterService+"/SayHello", "-H", "X-Canary=true")
	if res.code != 0 || !strings.Contains(res.stdout, "matches "+all+" rule 1: x-canary=true => v2") || !strings.Contains(res.stdout, "v2    100%   1") || res.stderr != "" {
		t.Errorf("test with the canary header: %v", res)
	}
	res = routes(t, rs, "test", greeterService+"/SayHello", "-H", "x-canary:false")
	if res.code != 0 || !strings.Contains(res.stdout, "matches "+all+" rule 2: v1:90,v2:10") ||
		!strings.Contains(res.stdout, "v1    90%") || !strings.Contains(res.stdout, "v2    10%") {
		t.Errorf("test without the canary header: %v", res)
	}
	res = routes(t, rs, "test", greeterService+"/SlowHello", "-H", "x-canary=true")
	if res.code != 0 || !strings.Contains(res.stdout, "matches "+greeterService+"/SlowHello rule 1: v1") {
		t.Errorf("test of the method's own route: %v", res)
	}

	// A client applies the table the CLI wrote.
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	gc := greeterv1.NewGreeterClient(client)
	for i := range 20 {
		reply, err := gc.SayHello(context.Background(), &greeterv1.SayHelloRequest{Name: "ada"}, tunnel.WithHeader("x-canary", "true"))
		if err != nil || reply.GetMessage() != "v2 says hi to ada" {
			t.Fatalf("canary call %d: %q, %v; want v2's answer", i, reply.GetMessage(), err)
		}
	}

	res = routes(t, rs, "rm", all)
	if res.code != 0 || !strings.Contains(res.stdout, all+": removed (was: 'x-canary=true => v2' v1:90,v2:10)") ||
		!strings.Contains(res.stdout, "lane v2 is no longer routed and empty") {
		t.Fatalf("rm: %v", res)
	}
	res = routes(t, rs, "rm", all)
	if res.code != 1 || !strings.Contains(res.stderr, "has no route "+all) || !strings.Contains(res.stderr, "its routes: "+greeterService+"/SlowHello") {
		t.Fatalf("rm of a missing route: %v; want exit 1 listing the routes", res)
	}
	res = routes(t, rs, "test", greeterService+"/SayHello")
	if res.code != 0 || !strings.Contains(res.stdout, "no rule matches: the default lane") || !strings.Contains(res.stderr, "warning: lane default has no live server") {
		t.Errorf("test after rm: %v", res)
	}
}

func TestRoutesRejectBadInput(t *testing.T) {
	rs := redistest.Start(t)
	url := rs.URL()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"set", greeterService, "v2"}, []string{"names no method", greeterService + "/*"}},
		{[]string{"set", greeterService + "/Say*", "v2"}, []string{"exact name", "partial wildcards"}},
		{[]string{"set", "{x}/Say", "v2"}, []string{"not a service name"}},
		{[]string{"set", greeterService + "/*"}, []string{"usage: rpr routes set PATTERN RULE..."}},
		{[]string{"set", greeterService + "/*", "V2"}, []string{"rule 1", `lane "V2"`, "e.g. v2"}},
		{[]string{"set", greeterService + "/*", "v2", "x-canary=true"}, []string{"rule 2", "goes before =>", "'x-canary=true => v2'"}},
		{[]string{"set", greeterService + "/*", "v1:90,v2:x"}, []string{"weight", "whole number"}},
		{[]string{"set", greeterService + "/*", "v1:0"}, []string{"add up to 0"}},
		{[]string{"set", greeterService + "/*", "v1,v1"}, []string{"listed twice"}},
		{[]string{"set", greeterService + "/*", "canary => v2"}, []string{"not key=value"}},
		{[]string{"set", greeterService + "/*", "v2", "--drain-to", "Nope"}, []string{"--drain-to", `lane "Nope"`}},
		{[]string{"rm", "no pe"}, []string{"want pkg.Svc/Method or pkg.Svc/*"}},
		{[]string{"rm", "examples.greeter.v1.Greeter"}, []string{"names no method", "examples.greeter.v1.Greeter/*"}},
		{[]string{"ls", greeterService + "/SayHello"}, []string{"names a method", greeterService}},
		{[]string{"ls", greeterService, "-o", "yaml"}, []string{"-o \"yaml\"", "-o json"}},
		{[]string{"test", greeterService + "/*"}, []string{"one method", greeterService + "/SayHello"}},
		{[]string{"test", greeterService + "/SayHello", "-H", "novalue"}, []string{"want key=value", "-H x-canary=true"}},
		{[]string{"drain", greeterService, "v2", "--to", "v2"}, []string{"into itself", "--to"}},
		{[]string{"drain", greeterService, "B@d"}, []string{"LANE", `lane "B@d"`}},
		{[]string{"drain", greeterService}, []string{"usage: rpr routes drain SERVICE LANE"}},
		{[]string{"set", greeterService + "/*", "v2", "--bogus"}, []string{"unknown flag: --bogus"}},
	} {
		args := append([]string{"routes"}, tc.args...)
		args = append(args, "--redis", url)
		res := runCLI(t, "", args...)
		if res.code != 2 {
			t.Errorf("rpr %s: exit %d, want 2\n%v", strings.Join(args, " "), res.code, res)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(res.stderr, w) {
				t.Errorf("rpr %s: message lacks %q:\n%v", strings.Join(args, " "), w, res)
			}
		}
	}
	if res := runCLI(t, "", "routes", "sett"); res.code != 2 || !strings.Contains(res.stderr, "did you mean set") {
		t.Errorf("routes sett: %v", res)
	}
	// Nothing was written by any of them.
	if table, err := serviceOf(rs.Client(t), greeterService).Routes().List(context.Background()); err != nil || len(table) != 0 {
		t.Errorf("bad input changed the table: %+v, %v", table, err)
	}
}

// TestRoutesWarnAboutLanesWithoutServer: set and test say when a lane
// they route to has no live server, without failing.
func TestRoutesWarnAboutLanesWithoutServer(t *testing.T) {
	rs := redistest.Start(t)
	startLaneServer(t, rs, greeterService, "v1", 0, func(s *tunnel.Server) { greeterv1.RegisterGreeterServer(s, greeter.Server{}) })
	res := routes(t, rs, "set", greeterService+"/*", "v1:90,v9:10")
	if res.code != 0 || !strings.Contains(res.stderr, `warning: lane v9 has no live server`) || !strings.Contains(res.stderr, `ServerOptions.Lane "v9"`) ||
		strings.Contains(res.stderr, "lane v1 has no") {
		t.Fatalf("set to a lane without servers: %v; want exit 0 and a warning about v9 only", res)
	}
	res = routes(t, rs, "test", greeterService+"/SayHello")
	if res.code != 0 || !strings.Contains(res.stderr, "warning: lane v9 has no live server") {
		t.Errorf("test: %v", res)
	}
	res = routes(t, rs, "ls", greeterService)
	if !strings.Contains(res.stdout, `note: lane v9 is routed but has no live server`) {
		t.Errorf("ls: %v", res)
	}
	res = routes(t, rs, "set", greeterService+"/SayHello", "v1", "x-canary=true => v9")
	if res.code != 0 || !strings.Contains(res.stderr, "rule 2 (x-canary=true => v9) is never reached: rule 1 (v1) matches every call") {
		t.Errorf("set with an unreachable rule: %v", res)
	}
	res = routes(t, rs, "set", greeterService+"/SayHelo", "v1")
	if res.code != 0 || !strings.Contains(res.stderr, "has no method SayHelo in the schema") {
		t.Errorf("set of a misspelt method: %v", res)
	}
}

// TestRoutesRmDrainsLaneWithoutServers: async requests queued in a lane
// whose servers are gone are moved to the default lane when rm takes the
// lane's route away, and run there once; with --no-drain they stay until
// rpr routes drain moves them.
func TestRoutesRmDrainsLaneWithoutServers(t *testing.T) {
	rs := redistest.Start(t)
	ship := ordersService + "/ShipOrder"
	stopV2 := startLaneServer(t, rs, ordersService, "v2", 0, func(s *tunnel.Server) {
		ordersv1.RegisterOrdersServer(s, &countingWarehouse{shipped: map[string]int{}})
	})
	stopV2() // lane v2's servers are gone

	res := routes(t, rs, "set", ship, "v2")
	if res.code != 0 || !strings.Contains(res.stderr, "warning: lane v2 has no live server") {
		t.Fatalf("set: %v", res)
	}
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	orders := ordersv1.NewOrdersClient(client)
	enqueue := func(prefix string, n int) {
		t.Helper()
		for i := range n {
			id := fmt.Sprintf("%s-%d", prefix, i)
			if _, err := orders.ShipOrder(context.Background(), &ordersv1.ShipOrderRequest{OrderId: id, Sku: "BOOK", Quantity: 1}, tunnel.WithIdempotencyKey(id)); err != nil {
				t.Fatal(err)
			}
		}
	}
	const n = 40
	enqueue("a", n)
	if got := laneOf(t, rs, ordersService, "v2").Queued; got != n {
		t.Fatalf("lane v2 holds %d requests, want %d", got, n)
	}

	res = routes(t, rs, "rm", ship)
	if res.code != 0 || !strings.Contains(res.stdout, fmt.Sprintf("lane v2 is no longer routed and has no live server: moved %d queued requests to lane default", n)) ||
		!strings.Contains(res.stderr, "warning: lane default has no live server") {
		t.Fatalf("rm: %v", res)
	}
	if got := laneOf(t, rs, ordersService, tunnel.DefaultLane).Queued; got != n {
		t.Fatalf("the default lane holds %d requests after the drain, want %d", got, n)
	}

	// --no-drain leaves them; rpr routes drain moves them by hand.
	if res = routes(t, rs, "set", ship, "v2"); res.code != 0 {
		t.Fatalf("set again: %v", res)
	}
	waitUntil(t, "the client to route to v2 again", func() bool {
		enqueue("probe", 1)
		return laneOf(t, rs, ordersService, "v2").Queued > 0
	})
	enqueue("b", n)
	queued := laneOf(t, rs, ordersService, "v2").Queued
	res = routes(t, rs, "rm", ship, "--no-drain")
	if res.code != 0 || !strings.Contains(res.stdout, fmt.Sprintf("held %d requests; not moved (--no-drain)", queued)) ||
		!strings.Contains(res.stdout, "rpr routes drain "+ordersService+" v2") {
		t.Fatalf("rm --no-drain: %v", res)
	}
	res = routes(t, rs, "drain", ordersService, "v2")
	if res.code != 0 || !strings.Contains(res.stdout, fmt.Sprintf("moved %d requests from lane v2 to lane default; 0 left", queued)) {
		t.Fatalf("drain: %v", res)
	}

	// Every order runs once, in the default lane.
	warehouse := &countingWarehouse{shipped: map[string]int{}}
	startLaneServer(t, rs, ordersService, "", 0, func(s *tunnel.Server) { ordersv1.RegisterOrdersServer(s, warehouse) })
	want := 2*n + 1 // "probe-0" is one key, enqueued until routed
	waitUntil(t, "every order shipped", func() bool { orders, _ := warehouse.count(); return orders == want })
	time.Sleep(300 * time.Millisecond) // a duplicate would show by now
	if orders, runs := warehouse.count(); runs != orders {
		t.Errorf("%d orders ran %d times", orders, runs)
	}
	if res = routes(t, rs, "drain", ordersService, "v2"); res.code != 0 || !strings.Contains(res.stdout, "moved 0 requests from lane v2 to lane default; 0 left") {
		t.Errorf("drain of an empty lane: %v", res)
	}
}

// TestRoutesRmLeavesLaneToItsServers: a lane that loses its route while
// its servers are live is theirs to finish; rm says so and moves nothing.
func TestRoutesRmLeavesLaneToItsServers(t *testing.T) {
	rs := redistest.Start(t)
	ship := ordersService + "/ShipOrder"
	warehouse := &countingWarehouse{shipped: map[string]int{}, release: make(chan struct{})}
	startLaneServer(t, rs, ordersService, "v2", 1, func(s *tunnel.Server) { ordersv1.RegisterOrdersServer(s, warehouse) })
	if res := routes(t, rs, "set", ship, "v2"); res.code != 0 || res.stderr != "" {
		t.Fatalf("set: %v", res)
	}
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	orders := ordersv1.NewOrdersClient(client)
	const n = 5
	for i := range n {
		id := fmt.Sprintf("held-%d", i)
		if _, err := orders.ShipOrder(context.Background(), &ordersv1.ShipOrderRequest{OrderId: id, Sku: "BOOK", Quantity: 1}, tunnel.WithIdempotencyKey(id)); err != nil {
			t.Fatal(err)
		}
	}
	res := routes(t, rs, "rm", ship)
	if res.code != 0 || !strings.Contains(res.stdout, fmt.Sprintf("lane v2 is no longer routed and holds %d requests: its 1 live server will drain it", n)) ||
		!strings.Contains(res.stdout, "rpr routes ls "+ordersService+"` shows QUEUED 0") {
		t.Fatalf("rm: %v", res)
	}
	res = routes(t, rs, "ls", ordersService)
	if !strings.Contains(res.stdout, "v2       no      1             5") || !strings.Contains(res.stdout, "note: lane v2 is no longer routed") {
		t.Errorf("ls while v2 drains: %v", res)
	}
	close(warehouse.release)
	waitUntil(t, "lane v2 served empty", func() bool { return laneOf(t, rs, ordersService, "v2").Queued == 0 })
	if orders, runs := warehouse.count(); orders != n || runs != n {
		t.Errorf("lane v2's server shipped %d orders in %d runs, want %d", orders, runs, n)
	}
}
