package ingress

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/grpclog"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/reflection"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/egress"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	"github.com/rprtunnel/rpr/internal/nettest"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// grpcWorld is a gRPC tunnel in one process: an upstream grpc-go server
// (gRPC's interop TestService, with reflection, plus a few test cases of
// our own), a Redis, an egress forwarding by its own table, and an
// ingress in front of it, on two listeners: net/http with h2c
// (ServeHTTP) and its own gRPC server (Serve).
type grpcWorld struct {
	t        testing.TB
	rdb      *redis.Client
	ingress  *grpcHandler
	up       *testUpstream
	upAddr   string
	deadAddr string // a loopback address nobody listens on
	httpConn *grpc.ClientConn
	native   *grpc.ClientConn
	small    *grpc.ClientConn // to Serve, as host small.test, whose route takes 1 KiB messages
	client   *tunnel.Client
	// egressHeader is the rpr header of the last call the egress took.
	egressHeader atomic.Pointer[tunnel.Metadata]
}

func newGRPCWorld(t testing.TB, tune ...func(*grpcHandler)) *grpcWorld {
	t.Helper()
	w := &grpcWorld{t: t}
	w.up, w.upAddr = startUpstream(t)
	w.deadAddr = nettest.RefusedAddr(t)
	rs := redistest.Start(t)
	w.rdb = rs.Client(t)
	quiet := slog.New(slog.DiscardHandler)
	// The ingress's listeners: ServeHTTP's and Serve's (see below).
	hl, gl := listen(t), listen(t)

	routes := []upstream.Route{
		{Name: "testing", PathPrefix: "/grpc.testing.TestService", Upstream: "grpc://" + w.upAddr, Timeout: upstream.Duration(7 * time.Second)},
		{Name: "reflection", PathPrefix: "/grpc.reflection.v1.ServerReflection", Upstream: "grpc://" + w.upAddr},
		{Name: "down", PathPrefix: "/down.Service", Upstream: "grpc://" + w.deadAddr},
		// A route back to the ingress itself: a forwarding loop.
		{Name: "loop", PathPrefix: "/loop.Service", Upstream: "grpc://" + gl.Addr().String()},
	}
	egressTable := mustTable(t, routes)
	// The ingress knows one route more than the egress.
	ingressTable := mustTable(t, append(routes,
		upstream.Route{Name: "egressless", PathPrefix: "/egressless.Service", Upstream: "grpc://" + w.upAddr},
		upstream.Route{Name: "laneless", PathPrefix: "/laneless.Service", Upstream: "grpc://" + w.upAddr, Lane: "nowhere"},
		upstream.Route{Name: "small", Host: "small.test", PathPrefix: "/grpc.testing.TestService", Upstream: "grpc://" + w.upAddr, MaxBodyBytes: 1024},
	))
	httpTable := upstream.NewTable(upstream.HTTP, 1, nil)

	record := func(srv any, ss tunnel.ServerStream, _ *tunnel.StreamServerInfo, handler tunnel.StreamHandler) error {
		h := tunnel.HeaderFromContext(ss.Context()).Clone()
		w.egressHeader.Store(&h)
		return handler(srv, ss)
	}
	srv, err := tunnel.NewServer(w.rdb, tunnel.ServerOptions{WorkerID: "grpc-egress", Logger: quiet, StreamInterceptors: []tunnel.StreamServerInterceptor{record}})
	if err != nil {
		t.Fatal(err)
	}
	eg, err := egress.Register(srv, egress.Options{
		HTTPRoutes: func() *upstream.Table { return httpTable },
		GRPCRoutes: func() *upstream.Table { return egressTable },
		Log:        quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("egress Serve: %v", err)
		}
		eg.Close()
	})

	w.client, err = tunnel.NewClient(w.rdb, tunnel.ClientOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.client.Close() })
	w.ingress = newGRPCHandler(w.client, Options{GRPCRoutes: func() *upstream.Table { return ingressTable }, Log: quiet, Propagator: propagation.TraceContext{}})
	for _, f := range tune {
		f(w.ingress)
	}
	t.Cleanup(w.ingress.Stop)

	// ServeHTTP behind net/http, cleartext HTTP/2 (h2c) as rpr ingress
	// --listen serves it.
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: w.ingress, Protocols: protocols}
	go func() { _ = hs.Serve(hl) }()
	t.Cleanup(func() { _ = hs.Close() })
	// Serve on a listener of its own, as rpr ingress --grpc-listen.
	go func() { _ = w.ingress.Serve(gl) }()

	w.httpConn = dial(t, hl.Addr().String())
	w.native = dial(t, gl.Addr().String())
	w.small = dial(t, gl.Addr().String(), grpc.WithAuthority("small.test"))
	waitServing(t, w.rdb, upstream.GRPCService)
	return w
}

// conns are the two ways into the ingress, by name.
func (w *grpcWorld) conns() []struct {
	name string
	cc   *grpc.ClientConn
} {
	return []struct {
		name string
		cc   *grpc.ClientConn
	}{{"ServeHTTP", w.httpConn}, {"Serve", w.native}}
}

func mustTable(t testing.TB, routes []upstream.Route) *upstream.Table {
	t.Helper()
	table := upstream.NewTable(upstream.GRPC, 1, routes)
	for name, err := range table.Invalid {
		t.Fatalf("route %s: %v", name, err)
	}
	return table
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// startUpstream starts the upstream gRPC server on loopback.
func startUpstream(t testing.TB) (*testUpstream, string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := newTestUpstream()
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, up)
	reflection.Register(s)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return up, l.Addr().String()
}

func waitServing(t testing.TB, rdb redis.UniversalClient, service string) {
	t.Helper()
	a := admin.New(rdb, admin.Options{})
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := a.Service(service).Health(context.Background())
		if err == nil && h.Serving() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became live: %v", service, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkNoRelays fails t if goroutines of the passthrough are still
// running a second after the calls ended: every one is owned by a call
// and ends with it.
func checkNoRelays(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		left := relayGoroutines()
		if left == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("passthrough goroutines still running after their calls ended:\n%s", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func relayGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "ingress.(*grpcCall)") || strings.Contains(g, "egress.(*upstreamCall)") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// The interop cases report failures with grpclog's Fatal, which exits
// the process. testLogger turns them into t.Fatal of the running test
// (they run on its goroutine) and drops the rest of gRPC's logging.
type testLogger struct{ current atomic.Pointer[testing.T] }

var grpcLog = new(testLogger)

func init() { grpclog.SetLoggerV2(grpcLog) }

// run runs f as part of t, whose failure a Fatal from f becomes.
func (l *testLogger) run(t *testing.T, f func()) {
	t.Helper()
	l.current.Store(t)
	defer l.current.Store(nil)
	f()
}

func (l *testLogger) fatal(msg string) {
	if t := l.current.Load(); t != nil {
		t.Helper()
		t.Fatal(msg)
	}
	panic(msg)
}

func (*testLogger) Info(...any)             {}
func (*testLogger) Infoln(...any)           {}
func (*testLogger) Infof(string, ...any)    {}
func (*testLogger) Warning(...any)          {}
func (*testLogger) Warningln(...any)        {}
func (*testLogger) Warningf(string, ...any) {}
func (*testLogger) Error(...any)            {}
func (*testLogger) Errorln(...any)          {}
func (*testLogger) Errorf(string, ...any)   {}
func (*testLogger) V(int) bool              { return false }
func (l *testLogger) Fatal(args ...any)     { l.fatal(fmt.Sprint(args...)) }
func (l *testLogger) Fatalln(args ...any)   { l.fatal(fmt.Sprintln(args...)) }
func (l *testLogger) Fatalf(format string, args ...any) {
	l.fatal(fmt.Sprintf(format, args...))
}
