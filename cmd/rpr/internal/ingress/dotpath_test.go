package ingress_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	tunnelv1 "github.com/rprtunnel/rpr/gen/rpr/tunnel/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestDotSegmentsNeverReachTheUpstream: a path with . or .. segments,
// plain or escaped, would let an upstream resolve it outside the route's
// prefix (/inventory/../admin). The ingress answers 400, not executed,
// and the egress refuses it too when a request reaches Redis some other
// way; the upstream never sees one.
func TestDotSegmentsNeverReachTheUpstream(t *testing.T) {
	var hits atomic.Int64
	up := upstreamServer(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusOK)
	})
	w := newWorld(t, upstream.Route{Name: "inventory", PathPrefix: "/inventory", Upstream: up.URL})
	for _, path := range []string{"/inventory/../admin", "/inventory/%2e%2e/admin", "/inventory/..%2Fadmin", "/inventory/./x", `/inventory/..\admin`} {
		resp := w.do(w.request("GET", path, nil))
		body := readAll(t, resp.Body)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Rpr-Outcome") != "not executed" || !strings.Contains(body, "dot segment") {
			t.Errorf("GET %s: %d %q (outcome %q), want 400 naming the dot segment, not executed", path, resp.StatusCode, body, resp.Header.Get("X-Rpr-Outcome"))
		}
	}
	if resp := w.do(w.request("GET", "/inventory/a..b/.hidden", nil)); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /inventory/a..b/.hidden: %d, want 200 (dots inside a segment are not dot segments)", resp.StatusCode)
	}

	// Straight into Redis, past the ingress.
	client, err := tunnel.NewClient(w.rdb, tunnel.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	_, err = tunnelv1.NewHTTPClient(client).Forward(context.Background(), &tunnelv1.ForwardRequest{Request: &tunnelv1.HTTPRequest{Method: "GET", Host: "x", Path: "/inventory/../admin"}})
	if tunnel.CodeOf(err) != tunnel.InvalidArgument || !strings.Contains(err.Error(), "dot segment") {
		t.Errorf("a request sent past the ingress: %v, want INVALID_ARGUMENT naming the dot segment", err)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the upstream got %d requests, want only the one without dot segments", n)
	}
}
