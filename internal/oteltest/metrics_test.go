package oteltest_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/rprtunnel/rpr/tunnel"
)

func TestClientRecordsCallDurationByCode(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	e := newEnv(t, envConfig{client: tunnel.ClientOptions{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))}})
	if _, err := e.call(context.Background(), "Fail", "x"); tunnel.CodeOf(err) != tunnel.NotFound {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	found, inFlight, inFlightFound := false, int64(0), false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Histogram[float64]:
				if m.Name != "rpr.client.call.duration" {
					continue
				}
				for _, dp := range data.DataPoints {
					code, _ := dp.Attributes.Value("rpc.rpr.status_code")
					method, _ := dp.Attributes.Value("rpc.method")
					if code.AsInt64() == int64(tunnel.NotFound) && method.AsString() == "Fail" && dp.Count == 1 {
						found = true
					}
				}
			case metricdata.Sum[int64]:
				if m.Name != "rpr.client.calls.in_flight" {
					continue
				}
				for _, dp := range data.DataPoints {
					if method, _ := dp.Attributes.Value("rpc.method"); method.AsString() == "Fail" {
						inFlight, inFlightFound = dp.Value, true
					}
				}
			}
		}
	}
	if !found {
		t.Fatalf("no rpr.client.call.duration point for Fail with NOT_FOUND: %+v", rm)
	}
	// The call was counted in flight and then out again.
	if !inFlightFound || inFlight != 0 {
		t.Fatalf("rpr.client.calls.in_flight for Fail = %d (found: %v), want 0: %+v", inFlight, inFlightFound, rm)
	}
}

// TestBatchSizesAreRecorded checks that both sides report the size and
// cause of their batches: what a reader needs to see batching work.
func TestBatchSizesAreRecorded(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	e := newEnv(t, envConfig{client: tunnel.ClientOptions{MeterProvider: mp}, server: tunnel.ServerOptions{MeterProvider: mp}})
	for range 5 {
		if _, err := e.call(context.Background(), "Echo", "x"); err != nil {
			t.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[int64])
			if !ok || (m.Name != "rpr.client.batch.size" && m.Name != "rpr.server.batch.size") {
				continue
			}
			for _, dp := range h.DataPoints {
				kind, _ := dp.Attributes.Value("kind")
				cause, _ := dp.Attributes.Value("cause")
				if cause.AsString() != "full" && cause.AsString() != "drained" {
					t.Errorf("%s: cause %q", m.Name, cause.AsString())
				}
				kinds[kind.AsString()] += dp.Count
			}
		}
	}
	for _, kind := range []string{"send", "read", "complete"} {
		if kinds[kind] == 0 {
			t.Errorf("no batch sizes recorded for %q: %v", kind, kinds)
		}
	}
}
