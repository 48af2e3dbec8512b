package main

// The systems measured: the upstreams (HTTP and gRPC, in this process on
// loopback), the ways to reach them (directly, through
// httputil.ReverseProxy, through rpr ingress -> Redis -> rpr egress), and
// a client of each that compare.Measure drives.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/bench/internal/compare"
	"github.com/rprtunnel/rpr/internal/redisinfo"
)

// idlePerHost is the idle connections per host every HTTP transport here
// keeps: rpr egress's own figure, so the reverse proxy and the clients
// never close connections the load reuses.
const idlePerHost = 256

// newTransport is an HTTP/1.1 keep-alive transport of idlePerHost idle
// connections.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4 * idlePerHost,
		MaxIdleConnsPerHost: idlePerHost,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// upstreams are the servers every system reaches in the end, and the
// reverse proxy in front of the HTTP one.
type upstreams struct {
	http, proxy *http.Server
	grpc        *grpc.Server
	// httpAddr, proxyAddr, grpcAddr are their loopback addresses.
	httpAddr, proxyAddr, grpcAddr string
	served                        chan error
}

// startUpstreams serves, on loopback: an HTTP upstream answering every
// request (after reading its body) with a body of size bytes, a plain
// httputil.ReverseProxy to it, and the gRPC echo.
func startUpstreams(size int) (*upstreams, error) {
	u := &upstreams{served: make(chan error, 3)}
	body := payload(size)
	u.http = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		_, _ = w.Write(body)
	}), ReadHeaderTimeout: 10 * time.Second}
	var err error
	if u.httpAddr, err = u.serve(func(l net.Listener) error { return u.http.Serve(l) }); err != nil {
		return nil, err
	}
	target := &url.URL{Scheme: "http", Host: u.httpAddr}
	u.proxy = &http.Server{Handler: &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded() // as rpr egress does
		},
		Transport: newTransport(),
	}, ReadHeaderTimeout: 10 * time.Second}
	if u.proxyAddr, err = u.serve(func(l net.Listener) error { return u.proxy.Serve(l) }); err != nil {
		u.close()
		return nil, err
	}
	u.grpc = compare.NewGRPCEchoServer()
	if u.grpcAddr, err = u.serve(u.grpc.Serve); err != nil {
		u.close()
		return nil, err
	}
	return u, nil
}

// serve runs serve on a new loopback listener and returns its address.
func (u *upstreams) serve(serve func(net.Listener) error) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go func() { u.served <- serve(l) }()
	return l.Addr().String(), nil
}

func (u *upstreams) close() {
	for _, s := range []*http.Server{u.proxy, u.http} {
		if s != nil {
			_ = s.Close()
		}
	}
	if u.grpc != nil {
		u.grpc.Stop()
	}
}

// payload is size bytes of letters.
func payload(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

// ---- HTTP ----

// httpSystem is an HTTP client of one way to the upstream. Call sends
// one request (a POST of the payload it is given when post, else a GET)
// and checks the answer is the upstream's: 200 and respSize bytes.
type httpSystem struct {
	url      string
	post     bool
	respSize int
	client   *http.Client
	rpr      *deployment // nil when Redis is not on the way
}

func newHTTPSystem(addr string, post bool, respSize int, rpr *deployment) *httpSystem {
	return &httpSystem{url: "http://" + addr + "/bench", post: post, respSize: respSize, client: &http.Client{Transport: newTransport()}, rpr: rpr}
}

func (s *httpSystem) Call(ctx context.Context, in *wrapperspb.BytesValue) error {
	method, body := http.MethodGet, io.Reader(http.NoBody)
	if s.post {
		method, body = http.MethodPost, bytes.NewReader(in.GetValue())
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url, body)
	if err != nil {
		return err
	}
	if s.post {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s (%s %q): %s", method, s.url, resp.Status, "X-Rpr-Outcome", resp.Header.Get("X-Rpr-Outcome"), bytes.TrimSpace(msg))
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return err
	}
	if n != int64(s.respSize) {
		return fmt.Errorf("%s %s: a body of %d bytes, want %d", method, s.url, n, s.respSize)
	}
	return nil
}

// probe makes one GET and wants a 200, whatever the body.
func (s *httpSystem) probe(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

func (s *httpSystem) RedisFigures(ctx context.Context) (redisinfo.Sample, bool, error) {
	return s.rpr.redisFigures(ctx)
}

func (s *httpSystem) OtherCPU() ([]time.Duration, error) { return s.rpr.cpu() }

func (s *httpSystem) Close() { s.client.CloseIdleConnections() }

// ---- gRPC ----

// grpcSystem is a gRPC-go client of the echo, directly or through an
// ingress.
type grpcSystem struct {
	conn *grpc.ClientConn
	rpr  *deployment
}

func newGRPCSystem(addr string, rpr *deployment) (*grpcSystem, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &grpcSystem{conn: conn, rpr: rpr}, nil
}

func (s *grpcSystem) Call(ctx context.Context, in *wrapperspb.BytesValue) error {
	out := new(wrapperspb.BytesValue)
	if err := s.conn.Invoke(ctx, compare.GRPCEchoMethod, in, out); err != nil {
		return err
	}
	if !bytes.Equal(out.GetValue(), in.GetValue()) {
		return fmt.Errorf("the echo has %d bytes, not the %d sent", len(out.GetValue()), len(in.GetValue()))
	}
	return nil
}

func (s *grpcSystem) RedisFigures(ctx context.Context) (redisinfo.Sample, bool, error) {
	return s.rpr.redisFigures(ctx)
}

func (s *grpcSystem) OtherCPU() ([]time.Duration, error) { return s.rpr.cpu() }

func (s *grpcSystem) Close() { _ = s.conn.Close() }

// probeGRPC calls the echo at addr until a call goes through (the egress
// may not serve yet) and returns "" then. It returns why not otherwise:
// skip for a passthrough not there yet (UNIMPLEMENTED), warn for one that
// fails.
func probeGRPC(ctx context.Context, addr string) (skip, warn string) {
	s, err := newGRPCSystem(addr, nil)
	if err != nil {
		return "", err.Error()
	}
	defer s.Close()
	in := wrapperspb.Bytes([]byte("ready?"))
	for deadline := time.Now().Add(15 * time.Second); ; {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.Call(callCtx, in)
		cancel()
		switch {
		case err == nil:
			return "", ""
		case status.Code(err) == codes.Unimplemented || strings.Contains(err.Error(), "being written"):
			// The placeholder ingress answers HTTP 501 "gRPC passthrough
			// is being written", which grpc-go reports as UNKNOWN.
			return strings.Join(strings.Fields(err.Error()), " "), ""
		case ctx.Err() != nil || time.Now().After(deadline):
			return "", err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
}
