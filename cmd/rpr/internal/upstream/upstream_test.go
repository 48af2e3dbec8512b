package upstream

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/internal/redistest"
)

func TestMatch(t *testing.T) {
	table := NewTable(HTTP, 1, []Route{
		{Name: "any", Upstream: "http://any:80"},
		{Name: "api", PathPrefix: "/api", Upstream: "http://api:80"},
		{Name: "api-v2", PathPrefix: "/api/v2/", Upstream: "http://v2:80"},
		{Name: "shop", Host: "shop.example.com", PathPrefix: "/", Upstream: "http://shop:80"},
		{Name: "sub", Host: "*.example.com", PathPrefix: "/api", Upstream: "http://sub:80"},
		{Name: "bad", Upstream: "ftp://x"},
	})
	for _, c := range []struct{ host, path, want string }{
		{"other.org", "/", "any"},
		{"other.org", "/api", "api"},
		{"other.org", "/api/orders", "api"},
		{"other.org", "/apis", "any"}, // a segment boundary
		{"other.org", "/api/v2/x", "api-v2"},
		{"other.org", "/api/v2", "api"}, // "/api/v2/" needs the slash
		{"SHOP.example.com:8443", "/api", "shop"},
		{"eu.example.com", "/api/x", "sub"},
		{"eu.example.com", "/x", "any"},
		{"example.com", "/api", "api"}, // *.example.com is subdomains only
	} {
		r, ok := table.Match(c.host, c.path)
		if !ok || r.Name != c.want {
			t.Errorf("Match(%q, %q) = %v, want %s", c.host, c.path, r, c.want)
		}
	}
	if err := table.Invalid["bad"]; err == nil || !strings.Contains(err.Error(), "want a http:// or https:// address") {
		t.Errorf("invalid route: %v", err)
	}
	if _, ok := NewTable(HTTP, 1, nil).Match("h", "/"); ok {
		t.Error("an empty table matched")
	}
}

func TestRouteCheck(t *testing.T) {
	for _, c := range []struct {
		r    Route
		kind Kind
		want string
	}{
		{Route{Name: "a b", Upstream: "http://x"}, HTTP, "route name"},
		{Route{Name: "a", Upstream: ""}, HTTP, "no upstream"},
		{Route{Name: "a", Upstream: "grpc://x:1"}, HTTP, "want a http:// or https://"},
		{Route{Name: "a", Upstream: "http://x:1"}, GRPC, "want a grpc:// or grpcs://"},
		{Route{Name: "a", Upstream: "http://u:p@x:1"}, HTTP, "credentials"},
		{Route{Name: "a", Upstream: "http://x:1", Host: "x:80"}, HTTP, "without port"},
		{Route{Name: "a", Upstream: "http://x:1", PathPrefix: "api"}, HTTP, "starting with '/'"},
		{Route{Name: "a", Upstream: "http://x:1", Mode: "later"}, HTTP, "want sync, stream or async"},
		{Route{Name: "a", Upstream: "grpc://x:1", Mode: ModeAsync}, GRPC, "gRPC routes"},
		{Route{Name: "a", Upstream: "http://x:1", MaxBodyBytes: MaxBodyLimit + 1}, HTTP, "max_body_bytes"},
	} {
		if err := c.r.Check(c.kind); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%+v) = %v, want it to mention %q", c.r, err, c.want)
		}
	}
	r := Route{Name: "ok", Upstream: "http://x:1/base/", PathPrefix: "/api", StripPrefix: true}
	if err := r.Check(HTTP); err != nil {
		t.Fatal(err)
	}
	if r.Mode != ModeSync || r.Concurrency != DefaultConcurrency || r.MaxBodyBytes != DefaultMaxBodyBytes || time.Duration(r.Timeout) != DefaultTimeout {
		t.Errorf("defaults not filled in: %+v", r)
	}
	for path, want := range map[string]string{"/api": "/base/", "/api/orders": "/base/orders"} {
		if got := r.UpstreamPath(path); got != want {
			t.Errorf("UpstreamPath(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestStoreAndWatcher checks the table in Redis: every change bumps the
// version, an entry that is not a route does not spoil the others, and a
// watcher picks changes up and reports what it applied.
func TestStoreAndWatcher(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	s := NewStore(rdb, "", HTTP)
	v1, err := s.Set(ctx, Route{Name: "api", PathPrefix: "/api", Upstream: "http://127.0.0.1:1"})
	if err != nil || v1 != 1 {
		t.Fatalf("Set = %d, %v", v1, err)
	}
	if _, err := s.Set(ctx, Route{Name: "bad", Upstream: "ftp://x"}); err == nil {
		t.Fatal("Set took an invalid route")
	}
	rdb.HSet(ctx, "rpr:v1:{rpr.tunnel.v1.HTTP}:upstreams", "junk", "{not json")

	w := NewWatcher(s, "egress-1", slog.New(slog.DiscardHandler))
	if err := w.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if r, ok := w.Table().Match("h", "/api/x"); !ok || r.Name != "api" || w.Table().Invalid["junk"] == nil {
		t.Fatalf("table = %+v", w.Table())
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(runCtx) }()
	defer func() { stop(); <-done }()

	v2, err := s.Set(ctx, Route{Name: "api", PathPrefix: "/api", Upstream: "http://127.0.0.1:2"})
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	behind, err := s.WaitApplied(waitCtx, v2, []string{"egress-1"}, 50*time.Millisecond)
	if err != nil || len(behind) != 0 {
		t.Fatalf("WaitApplied: behind %v, %v", behind, err)
	}
	if r, _ := w.Table().Match("h", "/api"); r.Target().Host != "127.0.0.1:2" {
		t.Errorf("after the change the route goes to %s", r.Target())
	}
	v3, existed, err := s.Remove(ctx, "api")
	if err != nil || !existed || v3 != v2+1 {
		t.Fatalf("Remove = %d, %v, %v", v3, existed, err)
	}
	shortCtx, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if behind, _ := s.WaitApplied(shortCtx, v3, []string{"egress-1", "egress-gone"}, 50*time.Millisecond); len(behind) != 1 || behind[0] != "egress-gone" {
		t.Errorf("behind = %v, want only egress-gone", behind)
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(`{"http": {"api": {"path_prefix": "/api", "upstream": "http://10.0.0.5:8080"}},
		"grpc": {"greeter": {"path_prefix": "/helloworld.Greeter/", "upstream": "grpc://10.0.0.6:9090"}}}`), 0o600)
	h, g, err := ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := h.Match("x", "/api/1"); !ok {
		t.Error("HTTP route missing")
	}
	if _, ok := g.Match("x", "/helloworld.Greeter/SayHello"); !ok {
		t.Error("gRPC route missing")
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"http": {"api": {"upstream": "grpc://x:1"}}}`), 0o600)
	if _, _, err := ReadFile(bad); err == nil || !strings.Contains(err.Error(), "route api") {
		t.Errorf("bad file: %v", err)
	}
}

// TestIngressReports checks that an ingress's report counts while fresh,
// not once stale, and is withdrawn when its watcher stops.
func TestIngressReports(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	s := NewStore(rdb, "", HTTP)
	if _, err := s.Set(ctx, Route{Name: "api", PathPrefix: "/api", Upstream: "http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	id := NewIngressID()
	if !IsIngress(id) || IsIngress("worker-1") {
		t.Fatalf("IsIngress(%q) is false or IsIngress(worker-1) is true", id)
	}
	w := NewWatcher(s, id, slog.New(slog.DiscardHandler))
	if err := w.Load(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(runCtx) }()

	applied, err := s.Applied(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if live := LiveIngresses(applied, now); len(live) != 1 || live[0] != id || applied[id].Version != 1 {
		t.Fatalf("live ingresses %v, applied %v: want %s at version 1", live, applied, id)
	}
	if live := LiveIngresses(applied, now.Add(IngressStale)); len(live) != 0 {
		t.Errorf("a report %v old still counts: %v", IngressStale, live)
	}
	stop()
	<-done
	if applied, _ := s.Applied(ctx); len(applied) != 0 {
		t.Errorf("after the watcher stopped the reports are %v, want none", applied)
	}
}

// TestKindOf: a gRPC upstream goes in the gRPC table whatever the case of
// its scheme (url.Parse lowers it); anything else is the HTTP table's.
func TestKindOf(t *testing.T) {
	for raw, want := range map[string]Kind{"grpc://h:1": GRPC, "GRPCS://h:1": GRPC, "http://h": HTTP, "grpcx://h": HTTP, "": HTTP} {
		if got := KindOf(raw); got != want {
			t.Errorf("KindOf(%q) = %v, want %v", raw, got, want)
		}
	}
}

// TestHops: a count reads as itself, an absent one as 0, anything else as
// MaxHops; forwarding adds one, never past MaxHops+1.
func TestHops(t *testing.T) {
	for value, want := range map[string]int{"": 0, "0": 0, "3": 3, "8": 8, "-1": MaxHops, "x": MaxHops, "99999999999999999999": MaxHops} {
		if got := Hops(value); got != want {
			t.Errorf("Hops(%q) = %d, want %d", value, got, want)
		}
	}
	for value, want := range map[string]string{"": "1", "3": "4", "junk": "9", "1000": "9"} {
		if got := NextHops(value); got != want {
			t.Errorf("NextHops(%q) = %q, want %q", value, got, want)
		}
	}
}
