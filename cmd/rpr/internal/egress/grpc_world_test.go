package egress

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// egressWorld is an egress serving the tunnel services on a Redis, with
// a gRPC table the test sets, and an rpr client that calls them as any
// rpr client can.
type egressWorld struct {
	t      *testing.T
	table  atomic.Pointer[upstream.Table]
	egress *Egress
	client *tunnel.Client
}

func newEgressWorld(t *testing.T, tlsConfig *tls.Config) *egressWorld {
	t.Helper()
	rs := redistest.Start(t)
	w := &egressWorld{t: t}
	w.setRoutes()
	quiet := slog.New(slog.DiscardHandler)
	httpTable := upstream.NewTable(upstream.HTTP, 1, nil)
	srv, err := tunnel.NewServer(rs.Client(t), tunnel.ServerOptions{WorkerID: "egress-grpc", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	w.egress, err = Register(srv, Options{
		HTTPRoutes: func() *upstream.Table { return httpTable },
		GRPCRoutes: func() *upstream.Table { return w.table.Load() },
		Log:        quiet,
		TLS:        tlsConfig,
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
			t.Errorf("Serve: %v", err)
		}
		w.egress.Close()
	})
	w.client, err = tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.client.Close() })
	a := admin.New(rs.Client(t), admin.Options{})
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := a.Service(upstream.GRPCService).Health(context.Background())
		if err == nil && h.Serving() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the egress never became live: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return w
}

func (w *egressWorld) setRoutes(routes ...upstream.Route) {
	table := upstream.NewTable(upstream.GRPC, int64(len(routes)), routes)
	for name, err := range table.Invalid {
		w.t.Fatalf("route %s: %v", name, err)
	}
	w.table.Store(table)
}

// testUpstream is gRPC's interop TestService with an EmptyCall that does
// what the caller's x-case metadata says.
type testUpstream struct {
	testgrpc.TestServiceServer
	running chan struct{} // EmptyCall "block" has started
	release chan struct{}
}

func (u *testUpstream) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	switch v := md.Get("x-case"); {
	case len(v) == 0:
	case v[0] == "details":
		return nil, detailsStatus().Err()
	case v[0] == "block":
		u.running <- struct{}{}
		select {
		case <-u.release:
		case <-ctx.Done():
		}
	case v[0] == "header":
		_ = grpc.SendHeader(ctx, metadata.Pairs("x-up", "h", "x-up-bin", "\x00\x01"))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-up-trailer", "t"))
	}
	return &testgrpc.Empty{}, nil
}

func detailsStatus() *status.Status {
	info, _ := anypb.New(&errdetails.ErrorInfo{Reason: "STOCK", Domain: "shop.example"})
	return status.FromProto(&spb.Status{Code: int32(codes.Aborted), Message: "try again ☺", Details: []*anypb.Any{
		info, {TypeUrl: "type.googleapis.com/acme.v1.Unlinked", Value: []byte{0x08, 0x2a}},
	}})
}

// startUpstream serves a testUpstream on loopback (TLS when creds is
// set) and returns it, its server and its address.
func startUpstream(t *testing.T, opts ...grpc.ServerOption) (*testUpstream, *grpc.Server, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &testUpstream{TestServiceServer: interop.NewTestServer(), running: make(chan struct{}, 8), release: make(chan struct{})}
	s := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(s, up)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return up, s, l.Addr().String()
}

// selfSigned returns a server certificate for 127.0.0.1 and the pool
// that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upstream"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}, pool
}

func tlsServer(cert tls.Certificate) grpc.ServerOption {
	return grpc.Creds(credentials.NewServerTLSFromCert(&cert))
}
