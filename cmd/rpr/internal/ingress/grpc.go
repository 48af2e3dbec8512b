package ingress

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // callers that compress: gzip, as grpc-go clients offer
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/grpcraw"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	tunnelv1 "github.com/rprtunnel/rpr/gen/rpr/tunnel/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

// How the ingress tells a call whose caller sends one message and closes
// (a unary or server-streaming method, by far the most common) from the
// rest, without the method's schema. The first kind goes through the
// tunnel as rpr.tunnel.v1.GRPC/Call, whose open carries the message and
// the caller's close: the cheapest way through Redis. The rest go as
// GRPC/Stream, the caller's messages relayed as they come.
//
// The ingress waits for the caller's first message, for grpcFirstWait at
// most, then for its end or a second message, for grpcGrace at most. One
// message and the end make a Call. A second message, an end with no
// message, or a caller still open when a wait passes (a bidirectional
// caller that waits for an answer before it sends more, or a server that
// speaks first) make a Stream, sending what came and relaying the rest.
// gRPC clients send a unary call's message and its end together (one
// DATA frame with END_STREAM, or two back to back), so the waits cost a
// unary call nothing: its message and end are there at once. Only a
// caller that keeps its side open pays them. A method seen streaming (a
// second message, or an end with none) is remembered (grpcHandler.streaming),
// and its calls go as Streams after a first message, or grpcGrace
// without one. A unary call that misses a wait (a large message held up
// by flow control, a stalled machine) still works, at the price of a
// Stream. BenchmarkGRPCPassthrough measures both.
const (
	grpcFirstWait = 50 * time.Millisecond
	grpcGrace     = 3 * time.Millisecond
)

// grpcHandler takes gRPC calls of any service and method, without their
// schema, and sends each through the tunnel (rpr.tunnel.v1.GRPC) to the
// egress, which forwards it to the upstream its route names. It is a
// grpc.Server whose every method is unknown: UnknownServiceHandler
// relays them all, with the messages as bytes (grpcraw.Codec).
type grpcHandler struct {
	client tunnelv1.GRPCClient
	routes func() *upstream.Table
	log    *slog.Logger
	prop   propagation.TextMapPropagator
	// callerHeader is Options.CallerHeader, lower case: the metadata key
	// that names a caller for rate limits ("" for the peer's address).
	callerHeader string
	srv          *grpc.Server
	// firstWait and grace are grpcFirstWait and grpcGrace.
	firstWait, grace time.Duration
	// streaming are the methods seen to stream from the caller.
	streaming methodSet
	// asCall and asStream count the calls sent each way.
	asCall, asStream atomic.Int64
	// readers are the goroutines reading callers' messages. A reader
	// outlives its call until gRPC closes the call's stream, right after
	// the handler returns; Stop waits for them.
	readers sync.WaitGroup
}

func newGRPCHandler(client *tunnel.Client, opts Options) *grpcHandler {
	h := &grpcHandler{
		client:       tunnelv1.NewGRPCClient(client),
		routes:       opts.GRPCRoutes,
		log:          opts.Log,
		prop:         opts.Propagator,
		callerHeader: strings.ToLower(opts.CallerHeader),
		firstWait:    grpcFirstWait,
		grace:        grpcGrace,
	}
	h.srv = grpc.NewServer(
		grpc.UnknownServiceHandler(h.handle),
		grpc.ForceServerCodecV2(grpcraw.Codec{}),
		// Each route bounds its messages (max_body_bytes); this is the
		// most any route may allow.
		grpc.MaxRecvMsgSize(upstream.MaxBodyLimit),
		// Stop returns once every handler has, so that no call starts a
		// reader after Stop's wait for them.
		grpc.WaitForHandlers(true),
	)
	return h
}

// ServeHTTP serves one gRPC call that net/http received (HTTP/2: h2c or
// TLS). It is slower than Serve's own HTTP/2 server.
func (h *grpcHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.srv.ServeHTTP(w, r) }

// Serve serves gRPC alone on l until Stop.
func (h *grpcHandler) Serve(l net.Listener) error { return h.srv.Serve(l) }

// Stop ends Serve and the calls in flight (of Serve and ServeHTTP): their
// callers get UNAVAILABLE, and their rpr calls are cancelled.
func (h *grpcHandler) Stop() {
	h.srv.Stop()
	h.readers.Wait()
}

// handle relays one gRPC call: it finds the route of its method, then
// sends it as a Call or a Stream (see grpcFirstWait) with the caller's
// metadata, deadline and trace context. A call without a deadline gets
// the route's timeout when the route sets one; by default gRPC routes set
// none, as gRPC has none: a watch-style stream may stay open for hours.
func (h *grpcHandler) handle(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	md, _ := metadata.FromIncomingContext(ss.Context())
	hops := upstream.Hops(firstValue(md, grpcraw.HopsKey))
	if hops >= upstream.MaxHops {
		h.log.Warn("rpr ingress: refused a gRPC call that crossed too many tunnels (a forwarding loop?)", "hops", hops, "method", method)
		ss.SetTrailer(metadata.Pairs(grpcraw.OutcomeKey, OutcomeNotExecuted))
		return status.Error(codes.FailedPrecondition, upstream.LoopError(hops))
	}
	authority := firstValue(md, ":authority")
	route, ok := h.routes().Match(authority, method)
	if !ok {
		return status.Errorf(codes.Unimplemented, "rpr ingress: no rpr upstream route for %s (rpr upstreams set NAME --path /%s/ --upstream grpc://HOST:PORT)", method, serviceOf(method))
	}
	ctx := h.prop.Extract(ss.Context(), grpcraw.Carrier(md))
	if _, ok := ctx.Deadline(); !ok && route.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(route.Timeout))
		defer cancel()
	}
	// Cancelling ctx ends the reader's hand-offs and the rpr call, once
	// the handler is done with them.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := &grpcCall{h: h, ss: ss, ctx: ctx, cancel: cancel, route: route, method: method, in: make(chan received)}
	c.opts = c.callOptions(md, authority, hops)
	h.readers.Go(c.readCaller)
	return c.run()
}

// callOptions are the rpr call's options: the method and authority, the
// caller's address (its identity for rate limits, as for HTTP), the
// caller's metadata as headers (without what gRPC and rpr set
// themselves, grpcraw.Forwarded), the tunnels it crossed before (hops),
// the route's lane.
func (c *grpcCall) callOptions(md metadata.MD, authority string, hops int) []tunnel.CallOption {
	opts := make([]tunnel.CallOption, 0, 6+len(md))
	opts = append(opts, tunnel.CaptureRequestID(&c.id), tunnel.WithHeader(grpcraw.MethodHeader, c.method))
	if c.h.callerHeader != "" {
		opts = append(opts, tunnel.WithHeader(tunnel.CallerHeader, firstValue(md, c.h.callerHeader)))
	} else if p, ok := peer.FromContext(c.ss.Context()); ok && p.Addr != nil {
		host, _, err := net.SplitHostPort(p.Addr.String())
		if err != nil {
			host = p.Addr.String()
		}
		opts = append(opts, tunnel.WithHeader(tunnel.CallerHeader, host))
	}
	if authority != "" {
		opts = append(opts, tunnel.WithHeader(grpcraw.AuthorityHeader, authority))
	}
	if sub := contentSubtype(firstValue(md, "content-type")); sub != "" && sub != "proto" {
		opts = append(opts, tunnel.WithHeader(grpcraw.ContentSubtypeHeader, sub))
	}
	for k, vs := range md {
		if grpcraw.Forwarded(k) {
			for _, v := range vs {
				opts = append(opts, tunnel.WithHeader(k, v))
			}
		}
	}
	if hops > 0 {
		opts = append(opts, tunnel.WithHeader(grpcraw.HopsKey, strconv.Itoa(hops)))
	}
	if c.route.Lane != "" {
		opts = append(opts, tunnel.WithLane(c.route.Lane))
	}
	return opts
}

func firstValue(md metadata.MD, key string) string {
	if vs := md.Get(key); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// contentSubtype returns "json" for application/grpc+json, "" for
// application/grpc.
func contentSubtype(contentType string) string {
	rest, ok := strings.CutPrefix(contentType, "application/grpc")
	if !ok || !strings.HasPrefix(rest, "+") {
		return ""
	}
	sub, _, _ := strings.Cut(rest[1:], ";")
	return strings.ToLower(strings.TrimSpace(sub))
}

// serviceOf returns "pkg.Svc" for "/pkg.Svc/Method".
func serviceOf(method string) string {
	svc, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	return svc
}

// methodSetCap bounds how many methods a methodSet remembers: the names
// come from callers.
const methodSetCap = 4096

// methodSet is a bounded set of method names.
type methodSet struct {
	mu sync.RWMutex
	m  map[string]struct{}
}

func (s *methodSet) has(method string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.m[method]
	return ok
}

func (s *methodSet) add(method string) {
	if s.has(method) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]struct{}{}
	}
	if len(s.m) < methodSetCap {
		s.m[method] = struct{}{}
	}
}
