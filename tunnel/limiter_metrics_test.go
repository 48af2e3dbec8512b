package tunnel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/rprtunnel/rpr/tunnel"
)

// TestLimitRefusalsAreCounted makes the refusals of TestLimitTiersAndCallers
// and checks that rpr.client.limiter.refused counts them by method and
// tier, with the tiers no rule names folded into "other".
func TestLimitRefusalsAreCounted(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	setLimit(t, e.rdb, echoService, tunnel.LimitRule{Name: "free", Method: "*", Tier: "free", Limit: 2, Window: time.Minute})
	setLimit(t, e.rdb, echoService, tunnel.LimitRule{Name: "vip", Method: "*", Tier: "vip", Limit: 5, Window: time.Minute, Algorithm: tunnel.LimitGCRA})
	setLimit(t, e.rdb, echoService, tunnel.LimitRule{Name: "anyone-idem", Method: echoService + "/Idem", Tier: "*", Limit: 1, Window: time.Minute})
	reader := sdkmetric.NewManualReader()
	c := newLimitClient(t, e, tunnel.ClientOptions{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})

	refusals := map[string]int{}
	call := func(method, caller, tier string) {
		t.Helper()
		if err := echoAs(ctx, c, method, caller, tier); tunnel.CodeOf(err) == tunnel.ResourceExhausted {
			refusals[method+" "+tier]++
		} else if err != nil {
			t.Fatalf("%s as %s (%s): %v", method, caller, tier, err)
		}
	}
	for range 3 {
		call("Echo", "ann", "free") // 2 admitted, 1 refused
		call("Echo", "bob", "free") // another caller, another budget
	}
	for range 6 {
		call("Echo", "vic", "vip") // 5 admitted, 1 refused
	}
	call("Idem", "", "")
	call("Idem", "", "") // refused, tier normal: no rule names it
	call("Echo", "ann", "free")
	if want := map[string]int{"Echo free": 3, "Echo vip": 1, "Idem ": 1}; len(refusals) != len(want) ||
		refusals["Echo free"] != 3 || refusals["Echo vip"] != 1 || refusals["Idem "] != 1 {
		t.Fatalf("refusals = %v, want %v", refusals, want)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "rpr.client.limiter.refused" || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				svc, _ := dp.Attributes.Value("rpc.service")
				meth, _ := dp.Attributes.Value("rpc.method")
				tier, _ := dp.Attributes.Value("rpr.limit.tier")
				got[svc.AsString()+"/"+meth.AsString()+" "+tier.AsString()] += dp.Value
			}
		}
	}
	want := map[string]int64{echoService + "/Echo free": 3, echoService + "/Echo vip": 1, echoService + "/Idem other": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("rpr.client.limiter.refused{%s} = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}
