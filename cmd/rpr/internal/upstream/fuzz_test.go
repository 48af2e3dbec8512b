package upstream

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecodeRoute fuzzes what Store.Load does with each entry of an
// upstream table in Redis (decodeRoute, then Route.Check): no entry panics
// it, a refused entry is named in the error, checking a checked route
// changes nothing, and a route reads back as Set writes it.
func FuzzDecodeRoute(f *testing.F) {
	for _, r := range []Route{
		{Name: "orders", PathPrefix: "/orders", Upstream: "http://10.0.0.5:8080/base", StripPrefix: true, Mode: ModeAsync, Lane: "v2"},
		{Name: "shop", Host: "*.example.com", Upstream: "https://shop:443", Timeout: Duration(1500000000), MaxBodyBytes: 1 << 20, Concurrency: 8},
		{Name: "greeter", PathPrefix: "/helloworld.Greeter/", Upstream: "grpc://10.0.0.6:9090"},
	} {
		raw, _ := json.Marshal(r)
		f.Add(r.Name, string(raw), r.Name == "greeter")
	}
	f.Add("x", `{"upstream":"http://u:1@h","timeout":"-1s"}`, false)
	f.Add("x", `{"upstream":"grpcs://h/p","mode":"stream"}`, true)
	f.Fuzz(func(t *testing.T, name, raw string, grpc bool) {
		kind := HTTP
		if grpc {
			kind = GRPC
		}
		r, err := decodeRoute(name, raw)
		if err == nil {
			err = r.Check(kind)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "route ") {
				t.Fatalf("%q: the error %q does not name the route", raw, err)
			}
			return
		}
		checked := r
		if err := checked.Check(kind); err != nil || !reflect.DeepEqual(checked, r) {
			t.Fatalf("%q: checking the checked route changed it: %+v to %+v (%v)", raw, r, checked, err)
		}
		stored, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("%q: a checked route does not encode: %v", raw, err)
		}
		again, err := decodeRoute(name, string(stored))
		if err == nil {
			err = again.Check(kind)
		}
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("%q changed in a round trip through %s: was %+v, now %+v (%v)", raw, stored, r, again, err)
		}
		table := NewTable(kind, 1, []Route{r})
		if len(table.Invalid) > 0 {
			t.Fatalf("%q: a checked route is invalid in a table: %v", raw, table.Invalid)
		}
		if m, ok := table.Match("api.example.com:8080", r.PathPrefix+"x"); ok {
			_ = m.UpstreamPath(r.PathPrefix + "x")
		}
	})
}
