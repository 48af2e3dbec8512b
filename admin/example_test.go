package admin_test

import (
	"context"
	"fmt"
	"log"

	"go.opentelemetry.io/otel"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

// A deployment's queues at a glance: what `rpr stats` prints.
func ExampleClient_Stats() {
	ctx := context.Background()
	rdb, err := tunnel.Open(ctx, "redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()
	rows, err := admin.New(rdb, admin.Options{}).Stats(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, st := range rows {
		fmt.Printf("%s %s: %d queued, %d running, %d live workers, %d dead letters\n",
			st.Service, st.Lane, st.Lag, st.Pending, st.LiveWorkers, st.DeadLetters)
	}
}

// A gray release: one call in ten to lane v2, and every call whose
// x-canary header is "true".
func ExampleRoutes_Set() {
	ctx := context.Background()
	rdb, err := tunnel.Open(ctx, "redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()
	svc := admin.New(rdb, admin.Options{}).Service("examples.greeter.v1.Greeter")
	var rules []admin.RouteRule
	for _, spec := range []string{"x-canary=true => v2", "v1:90,v2:10"} {
		rule, err := admin.ParseRouteRule(spec)
		if err != nil {
			log.Fatal(err)
		}
		rules = append(rules, rule)
	}
	if err := svc.Routes().Set(ctx, svc.Name()+"/*", rules); err != nil {
		log.Fatal(err)
	}
}

// Replaying the dead letters of one method once its bug is fixed.
func ExampleDeadLetters_Replay() {
	ctx := context.Background()
	rdb, err := tunnel.Open(ctx, "redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()
	dlq := admin.New(rdb, admin.Options{}).Service("examples.orders.v1.Orders").DeadLetters()
	letters, err := dlq.List(ctx, admin.DeadLetterFilter{Method: "ShipOrder"}, 0)
	if err != nil {
		log.Fatal(err)
	}
	res, err := dlq.Replay(ctx, letters, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d replayed, %d had succeeded meanwhile, %d skipped\n", res.Replayed, res.AlreadySucceeded, len(res.Skipped))
}

// An exporter's queue gauges: register them once on the process's
// MeterProvider (an OpenTelemetry SDK provider with a Prometheus reader,
// in `rpr exporter`), and every collection reads the deployment's queues.
func ExampleClient_RegisterMetrics() {
	ctx := context.Background()
	rdb, err := tunnel.Open(ctx, "redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()
	reg, err := admin.New(rdb, admin.Options{}).RegisterMetrics(otel.GetMeterProvider(), admin.MetricsOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Unregister()
	// ... serve the provider's metrics until told to stop ...
}
