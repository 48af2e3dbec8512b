package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	ordersv1 "github.com/rprtunnel/rpr/gen/examples/orders/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

const ordersService = "examples.orders.v1.Orders"

// failingWarehouse refuses every order for good, so each one is
// dead-lettered at once.
type failingWarehouse struct {
	ordersv1.UnimplementedOrdersServer
}

func (failingWarehouse) ShipOrder(context.Context, *ordersv1.ShipOrderRequest) error {
	return tunnel.Permanent(errors.New("warehouse closed"))
}

// TestRegisterMetrics: the gauges of a deployment with two services
// (orders, with max_backlog 200000 in its proto, and the greeter, with
// none), discovered from Redis, with the orders' dead letter; per-service
// gauges carry no lane; a service that cannot be read does not hide the
// others; Unregister stops the callback. The names, units and attributes
// are the ones the Prometheus exporter turns into rpr_queue_length{...}.
func TestRegisterMetrics(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	srv, err := tunnel.NewServer(rs.Client(t), tunnel.ServerOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	greeterv1.RegisterGreeterServer(srv, greeter.Server{})
	ordersv1.RegisterOrdersServer(srv, failingWarehouse{})
	serve(t, srv, "greeter and orders")
	client := newLanesClient(t, rs.Client(t))
	a := handle(rdb)
	waitFor(t, "a live worker", func() bool {
		h, err := a.Service(ordersService).Health(ctx)
		return err == nil && h.Serving()
	})
	if _, err := ordersv1.NewOrdersClient(client).ShipOrder(ctx, &ordersv1.ShipOrderRequest{OrderId: "o-1", Sku: "s", Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the order dead-lettered", func() bool {
		n, err := a.Service(ordersService).DeadLetters().Len(ctx)
		return err == nil && n == 1
	})

	mp := &fakeProvider{}
	reg, err := a.RegisterMetrics(mp, admin.MetricsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	points, errs := mp.meter.collect(ctx)
	if len(errs) != 0 {
		t.Fatalf("collect: %v", errs)
	}
	orders, greeterSvc := "rpc.service="+ordersService, "rpc.service="+greeterService
	for name, want := range map[string]float64{
		"rpr.queue.capacity{" + orders + "}":                                200000,
		"rpr.queue.capacity{" + greeterSvc + "}":                            tunnel.DefaultMaxBacklog,
		"rpr.dlq.length{" + orders + "}":                                    1,
		"rpr.dlq.length{" + greeterSvc + "}":                                0,
		"rpr.dlq.capacity{" + orders + "}":                                  tunnel.DefaultMaxDeadLetters,
		"rpr.dlq.full{" + orders + "}":                                      0,
		"rpr.workers.live{" + orders + ",rpr.lane=default}":                 1,
		"rpr.queue.length{" + orders + ",rpr.lane=default}":                 0,
		"rpr.queue.oldest_pending_age{" + greeterSvc + ",rpr.lane=default}": 0,
		"rpr.queue.backlog{" + greeterSvc + ",rpr.lane=default}":            0,
		"rpr.queue.lag{" + orders + ",rpr.lane=default}":                    0,
		"rpr.queue.pending{" + orders + ",rpr.lane=default}":                0,
		"rpr.queue.consumers{" + orders + ",rpr.lane=default}":              1,
		"rpr.queue.retrying{" + orders + ",rpr.lane=default}":               0,
	} {
		got, ok := points[name]
		if !ok || got != want {
			t.Errorf("%s = %v (observed: %v); want %v", name, got, ok, want)
		}
	}
	// The dead letters and the cap are the service's, not a lane's; the
	// queue gauges are per lane.
	for name := range points {
		perService := strings.HasPrefix(name, "rpr.dlq.") || strings.HasPrefix(name, "rpr.queue.capacity{")
		if perService == strings.Contains(name, "rpr.lane=") {
			t.Errorf("point %s: per-service gauges have no lane, the others have one", name)
		}
	}
	if len(points) != 2*(4+8) {
		t.Errorf("%d points, want 24 (2 services, 1 lane each, 4 per-service and 8 per-lane gauges): %v", len(points), points)
	}
	for name, unit := range map[string]string{
		"rpr.queue.length": "{request}", "rpr.queue.lag": "{request}", "rpr.queue.pending": "{request}",
		"rpr.queue.oldest_pending_age": "s", "rpr.queue.consumers": "{consumer}", "rpr.queue.retrying": "{request}",
		"rpr.queue.backlog": "{request}", "rpr.workers.live": "{worker}", "rpr.dlq.length": "{request}",
		"rpr.queue.capacity": "{request}", "rpr.dlq.capacity": "{request}", "rpr.dlq.full": "1",
	} {
		g, ok := mp.meter.gauges[name]
		if !ok || g.unit != unit || g.desc == "" {
			t.Errorf("gauge %s: %+v (registered: %v); want unit %s and a description", name, g, ok, unit)
		}
	}

	// A pinned list; one service's workers hash is not a hash, so it
	// cannot be read: its error is reported, the orders' figures are not
	// hidden.
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if points, _ := mp.meter.collect(ctx); len(points) != 0 {
		t.Fatalf("after Unregister: %v", points)
	}
	if err := rdb.Set(ctx, tunnel.DefaultPrefix+"{bad.v1.Broken}:workers", "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.RegisterMetrics(mp, admin.MetricsOptions{Services: []string{"bad.v1.Broken", ordersService}}); err != nil {
		t.Fatal(err)
	}
	points, errs = mp.meter.collect(ctx)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "bad.v1.Broken") {
		t.Errorf("collect with a broken service: errors %v; want one naming bad.v1.Broken", errs)
	}
	if points["rpr.dlq.length{"+orders+"}"] != 1 || points["rpr.queue.capacity{"+orders+"}"] != 200000 {
		t.Errorf("the orders' figures beside a broken service: %v", points)
	}
	for name := range points {
		if strings.Contains(name, "bad.v1.Broken") || strings.Contains(name, greeterService) {
			t.Errorf("point %s: want only the pinned, readable orders service", name)
		}
	}
}
