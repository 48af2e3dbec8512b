package oteltest_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestLimitRefusalsAreCounted makes the refusals of tunnel's
// TestLimitTiersAndCallers and checks that rpr.client.limiter.refused
// counts them by method and tier, with the tiers no rule names folded into
// "other".
func TestLimitRefusalsAreCounted(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	setLimit(t, e.rdb, echoService, wire.LimitRule{Name: "free", Method: "*", Tier: "free", Limit: 2, Window: time.Minute})
	setLimit(t, e.rdb, echoService, wire.LimitRule{Name: "vip", Method: "*", Tier: "vip", Limit: 5, Window: time.Minute, Algorithm: wire.LimitGCRA})
	setLimit(t, e.rdb, echoService, wire.LimitRule{Name: "anyone-idem", Method: echoService + "/Idem", Tier: "*", Limit: 1, Window: time.Minute})
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

// setLimit stores rule r of service where clients read their rules: in
// the service's limits hash, under the rule's name, in its JSON form (what
// an operator's tool writes).
func setLimit(t *testing.T, rdb redis.UniversalClient, service string, r wire.LimitRule) {
	t.Helper()
	r, err := r.Normalize(service)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(context.Background(), store.NewKeyspace("").Limits(service), r.Name, raw).Err(); err != nil {
		t.Fatal(err)
	}
}

// newLimitClient makes a client on a Redis connection of its own; it
// reads the service's rules on its first call.
func newLimitClient(t *testing.T, e *env, opts tunnel.ClientOptions) *tunnel.Client {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = e.logger()
	}
	c, err := tunnel.NewClient(e.redis.Client(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// echoAs calls method name of the echo service as caller, of tier (the
// limiter's headers; "" leaves a header out).
func echoAs(ctx context.Context, c *tunnel.Client, name, caller, tier string) error {
	var opts []tunnel.CallOption
	if caller != "" {
		opts = append(opts, tunnel.WithHeader(tunnel.CallerHeader, caller))
	}
	if tier != "" {
		opts = append(opts, tunnel.WithHeader(tunnel.TierHeader, tier))
	}
	return c.Invoke(ctx, method(name), wrapperspb.String("x"), new(wrapperspb.StringValue), opts...)
}
