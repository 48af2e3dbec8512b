package ingress_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/egress"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/ingress"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// world is one tunnel in one process: a Redis, an egress server
// forwarding by a table the test sets, an ingress in front of it, and the
// routes both read.
type world struct {
	t       *testing.T
	rdb     redis.UniversalClient
	ingress *httptest.Server
	routes  atomic.Pointer[upstream.Table]
	admin   *admin.Client
}

func newWorld(t *testing.T, routes ...upstream.Route) *world {
	t.Helper()
	rs := redistest.Start(t)
	w := &world{t: t, rdb: rs.Client(t)}
	w.admin = admin.New(w.rdb, admin.Options{})
	w.setRoutes(routes...)
	tables := func() *upstream.Table { return w.routes.Load() }
	empty := upstream.NewTable(upstream.GRPC, 0, nil)
	grpcTables := func() *upstream.Table { return empty }
	quiet := slog.New(slog.DiscardHandler)

	srv, err := tunnel.NewServer(rs.Client(t), tunnel.ServerOptions{WorkerID: "egress-test", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	eg, err := egress.Register(srv, egress.Options{HTTPRoutes: tables, GRPCRoutes: grpcTables, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		eg.Close()
	})

	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	h, err := ingress.New(client, ingress.Options{HTTPRoutes: tables, GRPCRoutes: grpcTables, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	w.ingress = httptest.NewServer(h)
	t.Cleanup(w.ingress.Close)
	w.waitLive(upstream.HTTPService)
	return w
}

func (w *world) setRoutes(routes ...upstream.Route) {
	w.routes.Store(upstream.NewTable(upstream.HTTP, 1, routes))
	for name, err := range w.routes.Load().Invalid {
		w.t.Fatalf("route %s: %v", name, err)
	}
}

func (w *world) waitLive(service string) {
	w.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := w.admin.Service(service).Health(context.Background())
		if err == nil && h.Serving() {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s never became live: %v", service, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// upstreamServer starts an HTTP upstream on loopback.
func upstreamServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// request builds a request to the ingress for path (with query).
func (w *world) request(method, path string, body io.Reader) *http.Request {
	w.t.Helper()
	req, err := http.NewRequest(method, w.ingress.URL+path, body)
	if err != nil {
		w.t.Fatal(err)
	}
	return req
}

// do sends req to the ingress.
func (w *world) do(req *http.Request) *http.Response {
	w.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	w.t.Cleanup(func() { resp.Body.Close() })
	return resp
}
