package main

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	ordersv1 "github.com/rprtunnel/rpr/gen/examples/orders/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestBenchAnyMethod loads methods the running servers serve, named on the
// command line with a JSON request (-d), through their published schema:
// a unary one is called, an async one enqueued and waited for.
func TestBenchAnyMethod(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "bench-greeter")
	srv, err := tunnel.NewServer(rs.Client(t), tunnel.ServerOptions{WorkerID: "bench-orders", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	orders := &benchOrders{}
	ordersv1.RegisterOrdersServer(srv, orders)
	serve(t, rs, srv, ordersService)

	for _, tc := range []struct {
		method, data, mode string
	}{
		{greeterService + "/SayHello", `{"name": "Ada"}`, "unary"},
		{ordersService + "/ShipOrder", `{"orderId": "b-1", "sku": "SKU-1", "quantity": 1, "address": "x"}`, "async"},
	} {
		stdout, stderr, code := runBenchCLI(t, "bench", "--redis", rs.URL(), tc.method, "-d", tc.data, "-n", "40", "-c", "2", "--warmup", "0", "-o", "json")
		if code != 0 {
			t.Fatalf("bench %s: exit %d\nstdout:\n%s\nstderr:\n%s", tc.method, code, stdout, stderr)
		}
		var sum benchSummary
		if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
			t.Fatalf("bench %s -o json: %v\n%s", tc.method, err, stdout)
		}
		if sum.Method != tc.method || sum.Mode != tc.mode || sum.Calls != 40 || sum.OK != 40 || sum.Server != "existing" {
			t.Errorf("bench %s: method %s, mode %s, %d calls, %d ok, server %s; want %s, 40 ok calls on the existing server",
				tc.method, sum.Method, sum.Mode, sum.Calls, sum.OK, sum.Server, tc.mode)
		}
	}
	if n := orders.processed.Load(); n < 40 {
		t.Errorf("the Orders server processed %d requests; want the 40 bench enqueued (and the probe)", n)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{greeterService + "/SayHello", "-d", `{"nom": 1}`}, 2, "not a valid examples.greeter.v1.SayHelloRequest"},
		{[]string{greeterService + "/SayHello", "-d", `{"name": ""}`}, 1, "INVALID_ARGUMENT"},
		{[]string{greeterService + "/SayBye"}, 1, `no method "SayBye"`},
		{[]string{"acme.v1.Nope/Run"}, 1, "unknown service acme.v1.Nope; known: "},
		{[]string{greeterService + "/SayHello", "--mode", "async"}, 2, "drop --mode"},
		{[]string{greeterService + "/SayHello", "--payload", "10"}, 2, "-d"},
		{[]string{"-d", `{}`}, 2, "-z/--duration"},
	} {
		stdout, stderr, code := runBenchCLI(t, append([]string{"bench", "--redis", rs.URL(), "-n", "5", "--warmup", "0"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("bench %q: exit %d, want %d and %q\nstdout:\n%s\nstderr:\n%s", tc.args, code, tc.code, tc.want, stdout, stderr)
		}
	}
}
