package oteltest_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/rprtunnel/rpr/tunnel"
)

// TestClientBoundsCallsInFlight fills a client's two in-flight slots with
// slow calls: a third call waits for a slot, and one whose deadline passes
// while it waits fails with DEADLINE_EXCEEDED, not executed, and never
// reaches Redis. Every call's wait is measured.
func TestClientBoundsCallsInFlight(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	e := newEnv(t, envConfig{client: tunnel.ClientOptions{
		MaxInFlight:   2,
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	}})
	var slow sync.WaitGroup
	for range 2 {
		slow.Go(func() {
			if _, err := e.call(context.Background(), "Slow", "1s"); err != nil {
				t.Errorf("slow call: %v", err)
			}
		})
	}
	waitFor(t, "both slow calls to run", func() bool { return e.count("Slow") == 2 })

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := e.call(ctx, "Echo", "waits")
	cancel()
	if tunnel.CodeOf(err) != tunnel.DeadlineExceeded || !tunnel.NotExecuted(err) || !strings.Contains(err.Error(), "in-flight slots") {
		t.Fatalf("third call: %v; want DEADLINE_EXCEEDED, not executed, naming the in-flight slots", err)
	}
	echoes := e.count("Echo") // the warm-up call of newEnv ran before
	// A call with time to wait gets a slot once a slow call ends.
	got, err := e.call(context.Background(), "Echo", "later")
	if err != nil || got != "echo: later" {
		t.Fatalf("call that waited for a slot: %q, %v", got, err)
	}
	slow.Wait()
	if n := e.count("Echo"); n != echoes+1 {
		t.Errorf("Echo ran %d more times, want 1 (the refused call must not run)", n-echoes)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var waits uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "rpr.client.slot_wait" {
				for _, dp := range h.DataPoints {
					waits += dp.Count
				}
			}
		}
	}
	if waits < 4 {
		t.Errorf("rpr.client.slot_wait has %d measurements, want one per call (at least 4)", waits)
	}
}
