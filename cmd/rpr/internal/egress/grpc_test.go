package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/grpcraw"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	tunnelv1 "github.com/rprtunnel/rpr/gen/rpr/tunnel/v1"
	"github.com/rprtunnel/rpr/internal/nettest"
	"github.com/rprtunnel/rpr/tunnel"
)

const emptyCall = "/grpc.testing.TestService/EmptyCall"

// call makes an rpr.tunnel.v1.GRPC Call of method with an empty message,
// and returns the replies, the header and trailer, and the status.
func (w *egressWorld) call(ctx context.Context, method string, opts ...tunnel.CallOption) (n int, header, trailer tunnel.Metadata, err error) {
	if method != "" {
		opts = append(opts, tunnel.WithHeader(grpcraw.MethodHeader, method))
	}
	s, err := tunnelv1.NewGRPCClient(w.client).Call(ctx, &tunnelv1.CallRequest{}, opts...)
	if err != nil {
		return 0, nil, nil, err
	}
	header, _ = s.Header()
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return n, header, s.Trailer(), nil
		}
		if err != nil {
			return n, header, s.Trailer(), err
		}
		if err := proto.Unmarshal(m.GetData(), new(testgrpc.Empty)); err != nil {
			return n, header, nil, err
		}
		n++
	}
}

// TestGRPCForward calls the egress as any rpr client of
// rpr.tunnel.v1.GRPC can, in one world for all cases.
func TestGRPCForward(t *testing.T) {
	cert, pool := selfSigned(t)
	w := newEgressWorld(t, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	t.Run("Refusals", func(t *testing.T) { testRefusals(t, w) })
	t.Run("Upstream", func(t *testing.T) { testStatuses(t, w, cert) })
	t.Run("Failures", func(t *testing.T) { testFailures(t, w) })
	t.Run("ConnsRetired", func(t *testing.T) { testConnsRetired(t, w) })
}

// testRefusals: calls the egress must not forward get a status that
// names what is wrong, and say they were not sent.
func testRefusals(t *testing.T, w *egressWorld) {
	_, _, addr := startUpstream(t)
	w.setRoutes(upstream.Route{Name: "testing", PathPrefix: "/grpc.testing.TestService", Upstream: "grpc://" + addr})
	ctx := context.Background()
	cases := []struct {
		name   string
		method string
		opts   []tunnel.CallOption
		code   tunnel.Code
		says   string
	}{
		{"no method", "", nil, tunnel.InvalidArgument, "header rpr-grpc-method"},
		{"not a full method", "/grpc.testing.TestService", nil, tunnel.InvalidArgument, "/package.Service/Method"},
		{"no route", "/other.Service/Call", nil, tunnel.NotFound, "no upstream route"},
		{"metadata gRPC refuses", emptyCall, []tunnel.CallOption{tunnel.WithHeader("x-text", "line\nbreak")}, tunnel.InvalidArgument, "printable ASCII"},
	}
	for _, c := range cases {
		_, _, _, err := w.call(ctx, c.method, c.opts...)
		if tunnel.CodeOf(err) != c.code || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want %v saying %q", c.name, err, c.code, c.says)
		}
	}
	_, _, _, err := w.call(ctx, "/other.Service/Call")
	if f, ok := FailureOf(err); !ok || f.Reason != ReasonNoRoute {
		t.Errorf("no route: FailureOf = %+v, %v; want %s", f, ok, ReasonNoRoute)
	}
}

// testStatuses: what the upstream says arrives as it said it, over
// cleartext and TLS.
func testStatuses(t *testing.T, w *egressWorld, cert tls.Certificate) {
	_, _, plain := startUpstream(t)
	_, _, secure := startUpstream(t, tlsServer(cert))
	for _, up := range []string{"grpc://" + plain, "grpcs://" + secure} {
		w.setRoutes(upstream.Route{Name: "testing", PathPrefix: "/grpc.testing.TestService", Upstream: up})
		ctx := context.Background()
		n, header, trailer, err := w.call(ctx, emptyCall, tunnel.WithHeader("x-case", "header"))
		if err != nil || n != 1 {
			t.Fatalf("%s: %d replies, %v; want one", up, n, err)
		}
		if header.Get("x-up") != "h" || header.Get("x-up-bin") != "\x00\x01" || trailer.Get("x-up-trailer") != "t" {
			t.Errorf("%s: header %v, trailer %v: want the upstream's", up, header, trailer)
		}
		if header.Get("content-type") != "" {
			t.Errorf("%s: gRPC's own header crossed: %v", up, header)
		}
		_, _, _, err = w.call(ctx, emptyCall, tunnel.WithHeader("x-case", "details"))
		if got, want := grpcraw.Status(err).Proto(), detailsStatus().Proto(); !proto.Equal(got, want) {
			t.Errorf("%s: status\n got %v\nwant %v", up, got, want)
		}
		if _, ok := FailureOf(err); ok {
			t.Errorf("%s: the upstream's own status got the egress's failure detail", up)
		}
	}
}

// testFailures: an upstream that cannot be reached, one that
// goes away mid-call, each fail with whether the upstream may have
// received the call; one whose slots are all busy is not sent.
func testFailures(t *testing.T, w *egressWorld) {
	up, upSrv, addr := startUpstream(t)
	ctx := context.Background()

	w.setRoutes(upstream.Route{Name: "down", PathPrefix: "/grpc.testing.TestService", Upstream: "grpc://" + nettest.RefusedAddr(t)})
	_, _, _, err := w.call(ctx, emptyCall)
	if f, ok := FailureOf(err); tunnel.CodeOf(err) != tunnel.Unavailable || !ok || f.Sent || f.Route != "down" {
		t.Errorf("upstream down: %v, %+v; want UNAVAILABLE, route down, not sent", err, f)
	}

	w.setRoutes(upstream.Route{Name: "one", PathPrefix: "/grpc.testing.TestService", Upstream: "grpc://" + addr, Concurrency: 1})
	first := make(chan error, 1)
	go func() {
		_, _, _, err := w.call(ctx, emptyCall, tunnel.WithHeader("x-case", "block"))
		first <- err
	}()
	<-up.running
	busyCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, _, _, err = w.call(busyCtx, emptyCall)
	cancel()
	// The caller's deadline ends the call on both sides at once: the
	// caller's own DEADLINE_EXCEEDED comes first, and the upstream never
	// saw the call.
	if tunnel.CodeOf(err) != tunnel.DeadlineExceeded {
		t.Errorf("all slots busy: %v; want DEADLINE_EXCEEDED", err)
	}
	select {
	case <-up.running:
		t.Error("all slots busy: the upstream got the call anyway")
	case <-time.After(100 * time.Millisecond):
	}

	upSrv.Stop() // the upstream goes away with the first call in flight
	err = <-first
	if f, ok := FailureOf(err); tunnel.CodeOf(err) != tunnel.Unavailable || !ok || !f.Sent {
		t.Errorf("upstream gone mid-call: %v, %+v; want UNAVAILABLE, sent", err, f)
	}
}

// testConnsRetired: a connection to an upstream the table no longer
// names is closed once its calls are done; one still named is kept.
func testConnsRetired(t *testing.T, w *egressWorld) {
	_, _, a := startUpstream(t)
	_, _, b := startUpstream(t)
	ctx := context.Background()
	w.setRoutes(upstream.Route{Name: "a", PathPrefix: "/grpc.testing.TestService", Upstream: "grpc://" + a})
	if _, _, _, err := w.call(ctx, emptyCall); err != nil {
		t.Fatal(err)
	}
	w.setRoutes(upstream.Route{Name: "b", PathPrefix: "/grpc.testing.TestService", Upstream: "grpc://" + b})
	if _, _, _, err := w.call(ctx, emptyCall); err != nil {
		t.Fatal(err)
	}
	conns := w.egress.grpc.conns
	conns.mu.Lock()
	defer conns.mu.Unlock()
	if _, ok := conns.conns["grpc://"+a]; ok || len(conns.conns) != 1 {
		t.Errorf("connections after the change: %v, want only grpc://%s", conns.conns, b)
	}
}
