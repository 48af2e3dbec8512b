package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	ordersv1 "github.com/rprtunnel/rpr/gen/examples/orders/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestShardsGetSet: get prints the recorded count; set raises it, and
// refuses (exit 1, nothing changed) to lower it while the shards that
// would go hold requests, and lowers it once they are served.
func TestShardsGetSet(t *testing.T) {
	rs := redistest.Start(t)
	shards := func(args ...string) rprRun {
		t.Helper()
		return runCLI(t, "", append([]string{"shards"}, append(args, "--redis", rs.URL())...)...)
	}

	if res := shards("get", ordersService); res.code != 1 || !strings.Contains(res.stderr, "unknown service "+ordersService) {
		t.Fatalf("get of a service Redis does not know: %v", res)
	}
	heartbeat(t, rs, ordersService)
	if res := shards("get", ordersService); res.code != 0 || !strings.Contains(res.stdout, ordersService+": 1 shard\n") {
		t.Fatalf("get of an unsharded service: %v", res)
	}
	if res := shards("set", ordersService, "4"); res.code != 0 || !strings.Contains(res.stdout, ordersService+": 1 -> 4 shards") {
		t.Fatalf("set 4: %v", res)
	}
	if res := shards("get", ordersService); res.code != 0 || !strings.Contains(res.stdout, ordersService+": 4 shards\n") {
		t.Fatalf("get after set 4: %v", res)
	}
	if res := shards("set", ordersService, "4"); res.code != 0 || !strings.Contains(res.stdout, "already 4 shards; nothing changed") {
		t.Fatalf("set 4 again: %v", res)
	}

	// Orders queued with no server running spread over the four shards.
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	orders := ordersv1.NewOrdersClient(client)
	const n = 40
	for i := range n {
		if _, err := orders.ShipOrder(context.Background(), &ordersv1.ShipOrderRequest{OrderId: fmt.Sprint(i), Sku: "BOOK", Quantity: 1}); err != nil {
			t.Fatal(err)
		}
	}
	res := shards("set", ordersService, "1")
	if res.code != 1 || !strings.Contains(res.stderr, "refusing to go from 4 to 1 shards") || !strings.Contains(res.stderr, "nothing changed") {
		t.Fatalf("set 1 over queued requests: %v; want exit 1 and a refusal", res)
	}
	if res := shards("get", ordersService); !strings.Contains(res.stdout, ": 4 shards") {
		t.Fatalf("the refused set changed the count: %v", res)
	}

	warehouse := &countingWarehouse{shipped: map[string]int{}}
	startLaneServer(t, rs, ordersService, "", 0, func(s *tunnel.Server) { ordersv1.RegisterOrdersServer(s, warehouse) })
	waitUntil(t, "every order shipped", func() bool { orders, _ := warehouse.count(); return orders == n })
	waitUntil(t, "the shards to empty and set 1 to succeed", func() bool { return shards("set", ordersService, "1").code == 0 })
	if res := shards("get", ordersService); !strings.Contains(res.stdout, ": 1 shard\n") {
		t.Fatalf("get after set 1: %v", res)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"set", ordersService, "0"}, "from 1 to 64"},
		{[]string{"set", ordersService, "65"}, "from 1 to 64"},
		{[]string{"set", ordersService, "four"}, `N "four"`},
		{[]string{"set", ordersService}, "usage: rpr shards set SERVICE N"},
		{[]string{"get", ordersService + "/ShipOrder"}, "names a method"},
	} {
		if res := shards(tc.args...); res.code != 2 || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("rpr shards %s: %v; want exit 2 mentioning %q", strings.Join(tc.args, " "), res, tc.want)
		}
	}
	if res := runCLI(t, "", "shards", "gett"); res.code != 2 || !strings.Contains(res.stderr, "did you mean get") {
		t.Errorf("rpr shards gett: %v", res)
	}
}
