package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/internal/redistest"
)

// TestLimitRuleValidation checks Normalize's defaults and its errors, which
// name the field at fault.
func TestLimitRuleValidation(t *testing.T) {
	const svc = "pkg.v1.Svc"
	r, err := admin.LimitRule{Name: "a", Method: "Get", Limit: 10, Window: time.Second}.Normalize(svc)
	if err != nil {
		t.Fatal(err)
	}
	if r.Method != svc+"/Get" || r.Tier != "*" || r.Algorithm != admin.LimitLog || r.Burst != 0 {
		t.Errorf("defaults: %+v", r)
	}
	g, err := admin.LimitRule{Name: "g", Limit: 10, Window: time.Second, Algorithm: "gcra"}.Normalize(svc)
	if err != nil || g.Burst != 10 || g.Method != "*" {
		t.Errorf("gcra defaults: %+v, %v", g, err)
	}
	ok := admin.LimitRule{Name: "ok", Method: "*", Tier: "*", Limit: 10, Window: time.Second}
	for _, tc := range []struct {
		field string
		edit  func(*admin.LimitRule)
	}{
		{"name", func(r *admin.LimitRule) { r.Name = "has:colon" }},
		{"name", func(r *admin.LimitRule) { r.Name = "" }},
		{"method", func(r *admin.LimitRule) { r.Method = "other.Svc/Get" }},
		{"tier", func(r *admin.LimitRule) { r.Tier = "v i p" }},
		{"limit", func(r *admin.LimitRule) { r.Limit = 0 }},
		{"limit", func(r *admin.LimitRule) { r.Limit = admin.MaxLogLimit + 1 }},
		{"window", func(r *admin.LimitRule) { r.Window = time.Microsecond }},
		{"window", func(r *admin.LimitRule) { r.Window = 48 * time.Hour }},
		{"algorithm", func(r *admin.LimitRule) { r.Algorithm = "token-bucket" }},
		{"burst", func(r *admin.LimitRule) { r.Burst = 5 }},
		{"burst", func(r *admin.LimitRule) { r.Algorithm, r.Burst = "gcra", 11 }},
	} {
		r := ok
		tc.edit(&r)
		_, err := r.Normalize(svc)
		var re *admin.LimitRuleError
		if !errors.As(err, &re) || re.Field != tc.field || re.Example == "" {
			t.Errorf("%+v: got %v, want an error about %s with an example", r, err, tc.field)
		}
	}
	if _, err := admin.ParseLimitRule(svc, "x", `{"method":"*","tier":"*","limit":1,"window":"1 sec"}`); err == nil {
		t.Error("a bad window parsed")
	}
	if _, err := admin.ParseLimitRule(svc, "x", `{"method":"*","limit":1,"window":"1s","per":"ip"}`); err == nil {
		t.Error("an unknown field parsed")
	}
}

// TestLimitsSetListRemove: Set normalizes and stores a rule under Key,
// refuses a bad one with a *LimitRuleError naming the field, List reads
// the rules back with the fields that are no rules, Remove deletes.
func TestLimitsSetListRemove(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	limits := handle(rdb).Service("pkg.v1.Svc").Limits()
	if key := limits.Key(); key != "rpr:v1:{pkg.v1.Svc}:limits" {
		t.Errorf("Key() = %q", key)
	}
	stored, err := limits.Set(ctx, admin.LimitRule{Name: "a", Method: "Get", Limit: 10, Window: time.Second})
	if err != nil || stored.Method != "pkg.v1.Svc/Get" || stored.Tier != "*" || stored.Algorithm != admin.LimitLog {
		t.Fatalf("Set = %+v, %v; want the rule normalized", stored, err)
	}
	_, err = limits.Set(ctx, admin.LimitRule{Name: "b", Limit: 0, Window: time.Second})
	var re *admin.LimitRuleError
	if !errors.As(err, &re) || re.Field != "limit" {
		t.Fatalf("Set of a rule without a limit: %v; want a *LimitRuleError about limit", err)
	}
	if err := rdb.HSet(ctx, limits.Key(), "broken", `{"limit":"lots"}`).Err(); err != nil {
		t.Fatal(err)
	}
	rules, invalid, err := limits.List(ctx)
	if err != nil || len(rules) != 1 || rules[0] != stored || len(invalid) != 1 || invalid[0].Name != "broken" || invalid[0].Err == nil {
		t.Fatalf("List = %+v, %+v, %v; want rule a and the broken field", rules, invalid, err)
	}
	if ok, err := limits.Remove(ctx, "a"); err != nil || !ok {
		t.Fatalf("Remove(a) = %v, %v", ok, err)
	}
	if ok, err := limits.Remove(ctx, "a"); err != nil || ok {
		t.Fatalf("Remove(a) again = %v, %v; want false", ok, err)
	}
}
