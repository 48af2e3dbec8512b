package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/headers"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	tunnelv1 "github.com/rprtunnel/rpr/gen/rpr/tunnel/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

// Headers the ingress reads and writes.
const (
	// TimeoutHeader sets a request's deadline ("5s"), instead of its
	// route's timeout.
	TimeoutHeader = "X-Rpr-Timeout"
	// RequestIDHeader is the rpr request id of every answer.
	RequestIDHeader = "X-Rpr-Request-Id"
	// OutcomeHeader says, on a failure, whether the upstream may have run
	// the request: OutcomeNotExecuted or OutcomeMayHaveExecuted.
	OutcomeHeader          = "X-Rpr-Outcome"
	OutcomeNotExecuted     = "not executed"
	OutcomeMayHaveExecuted = "may have executed"
)

// Options configure a Handler.
type Options struct {
	// HTTPRoutes and GRPCRoutes return the current upstream tables.
	HTTPRoutes, GRPCRoutes func() *upstream.Table
	// Log receives one line per failed request; nil discards.
	Log *slog.Logger
	// Propagator reads the callers' trace context, so that rpr's spans
	// continue their traces; default W3C trace context.
	Propagator propagation.TextMapPropagator
	// CallerHeader names the request header that identifies the caller
	// for rate limits (rpr limits on rpr.tunnel.v1.HTTP), such as
	// X-Api-Key; empty means the caller's IP address.
	CallerHeader string
}

// Handler sends the requests it serves through the tunnel.
type Handler struct {
	client *tunnel.Client
	http   tunnelv1.HTTPClient
	opts   Options
	grpc   *grpcHandler
}

// New returns a Handler that calls the tunnel services through client.
func New(client *tunnel.Client, opts Options) (*Handler, error) {
	if opts.HTTPRoutes == nil || opts.GRPCRoutes == nil {
		return nil, errors.New("rpr ingress: no upstream tables")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Propagator == nil {
		opts.Propagator = propagation.TraceContext{}
	}
	return &Handler{
		client: client,
		http:   tunnelv1.NewHTTPClient(client),
		opts:   opts,
		grpc:   newGRPCHandler(client, opts),
	}, nil
}

// ServeGRPC serves gRPC alone on l (rpr ingress --grpc-listen) until
// Stop.
func (h *Handler) ServeGRPC(l net.Listener) error { return h.grpc.Serve(l) }

// Stop ends ServeGRPC and its calls.
func (h *Handler) Stop() { h.grpc.Stop() }

// ServeHTTP implements http.Handler: gRPC calls (HTTP/2 with a gRPC
// content type) go to the gRPC tunnel, the rest to the HTTP one.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
		h.grpc.ServeHTTP(w, r)
		return
	}
	if hops := upstream.Hops(r.Header.Get(upstream.HopsHeader)); hops >= upstream.MaxHops {
		h.opts.Log.Warn("rpr ingress: refused a request that crossed too many tunnels (a forwarding loop?)", "hops", hops, "host", r.Host, "path", r.URL.Path)
		httpError(w, "", http.StatusLoopDetected, OutcomeNotExecuted, upstream.LoopError(hops))
		return
	}
	path := r.URL.EscapedPath()
	if _, err := upstream.DecodePath(path); err != nil {
		httpError(w, "", http.StatusBadRequest, OutcomeNotExecuted, "rpr ingress: "+err.Error())
		return
	}
	route, ok := h.opts.HTTPRoutes().Match(r.Host, path)
	if !ok {
		httpError(w, "", http.StatusNotFound, "", fmt.Sprintf("rpr ingress: no route takes host %q path %q (rpr upstreams ls; add one with rpr upstreams set NAME --path PREFIX --upstream URL)", r.Host, path))
		return
	}
	body, status, msg := readBody(w, r, route)
	if status != 0 {
		httpError(w, "", status, "", msg)
		return
	}
	timeout, callerTimeout := time.Duration(route.Timeout), false
	if v := r.Header.Get(TimeoutHeader); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			httpError(w, "", http.StatusBadRequest, "", fmt.Sprintf("rpr ingress: %s %q: want a positive duration such as 5s or 1m", TimeoutHeader, v))
			return
		}
		timeout, callerTimeout = d, true
	}
	in := r.Header.Clone()
	in.Del(TimeoutHeader)
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	req := &tunnelv1.HTTPRequest{
		Method: r.Method, Host: r.Host, Path: path, Query: r.URL.RawQuery,
		Headers: headers.ToProto(headers.EndToEnd(in)), Body: body,
		RemoteAddr: r.RemoteAddr, Scheme: scheme, Route: route.Name,
	}
	ctx := h.opts.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	var id string
	opts := []tunnel.CallOption{tunnel.CaptureRequestID(&id), tunnel.WithHeader(tunnel.CallerHeader, h.caller(r))}
	if route.Lane != "" {
		opts = append(opts, tunnel.WithLane(route.Lane))
	}
	mode := route.Mode
	if mode == upstream.ModeSync && strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		mode = upstream.ModeStream // server-sent events arrive as they come
	}
	switch mode {
	case upstream.ModeAsync:
		h.deliver(ctx, w, r, route, req, timeout, &id, opts)
	case upstream.ModeStream:
		if callerTimeout { // the caller bounds the whole response
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		h.forwardStream(ctx, w, route, req, timeout, &id, opts)
	default:
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp, err := h.http.Forward(ctx, &tunnelv1.ForwardRequest{Request: req}, opts...)
		if err != nil {
			h.fail(w, id, route, err)
			return
		}
		writeHead(w, id, resp.GetHeaders(), resp.GetTrailers(), int(resp.GetStatus()))
		_, _ = w.Write(resp.GetBody())
		setTrailers(w, resp.GetTrailers())
	}
}

// caller identifies the caller of r for rate limits.
func (h *Handler) caller(r *http.Request) string {
	if h.opts.CallerHeader != "" {
		return r.Header.Get(h.opts.CallerHeader)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// readBody reads r's body under route's limit; a non-zero status says why
// it could not.
func readBody(w http.ResponseWriter, r *http.Request, route *upstream.Route) ([]byte, int, string) {
	tooLarge := fmt.Sprintf("rpr ingress: the request body is over %d bytes, route %s's limit (raise it with rpr upstreams set %s --max-body BYTES)", route.MaxBodyBytes, route.Name, route.Name)
	if r.ContentLength > route.MaxBodyBytes {
		return nil, http.StatusRequestEntityTooLarge, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, route.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, http.StatusRequestEntityTooLarge, tooLarge
	case err != nil:
		return nil, http.StatusBadRequest, fmt.Sprintf("rpr ingress: read the request body: %v", err)
	}
	return body, 0, ""
}

// errNoHead is a stream whose response head did not come in time.
var errNoHead = errors.New("no response head within the route's timeout")

// forwardStream relays a streamed response: the head as soon as it
// comes (within headTimeout), then each part of the body, flushed, for as
// long as the upstream sends and the caller stays.
func (h *Handler) forwardStream(ctx context.Context, w http.ResponseWriter, route *upstream.Route, req *tunnelv1.HTTPRequest, headTimeout time.Duration, id *string, opts []tunnel.CallOption) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(headTimeout, func() { cancel(errNoHead) })
	s, err := h.http.ForwardStream(ctx, &tunnelv1.ForwardStreamRequest{Request: req}, append(opts, tunnel.WithTimeout(headTimeout))...)
	var head *tunnelv1.ForwardStreamResponse
	if err == nil {
		head, err = s.Recv()
	}
	timer.Stop()
	if errors.Is(context.Cause(ctx), errNoHead) {
		err = tunnel.Errorf(tunnel.DeadlineExceeded, "rpr ingress: route %s: %v (%v); the upstream may have received the request", route.Name, errNoHead, headTimeout)
	}
	if err != nil {
		h.fail(w, *id, route, err)
		return
	}
	rc := http.NewResponseController(w)
	writeHead(w, *id, head.GetHeaders(), nil, int(head.GetStatus()))
	_ = rc.Flush()
	for {
		part, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			// The status is out already: cut the response, so the caller
			// sees it incomplete rather than short.
			h.opts.Log.Warn("rpr ingress: streamed response broke", "request_id", *id, "error", err)
			panic(http.ErrAbortHandler)
		}
		if len(part.GetBody()) > 0 {
			if _, err := w.Write(part.GetBody()); err != nil {
				return // the caller went away; ctx ends the stream
			}
			_ = rc.Flush()
		}
		for _, t := range part.GetTrailers() {
			for _, v := range t.GetValues() {
				w.Header().Add(http.TrailerPrefix+t.GetName(), v)
			}
		}
	}
}

// deliver enqueues a request of an async route and answers 202 with its
// receipt; an Idempotency-Key header is the key rpr deduplicates on.
func (h *Handler) deliver(ctx context.Context, w http.ResponseWriter, r *http.Request, route *upstream.Route, req *tunnelv1.HTTPRequest, timeout time.Duration, id *string, opts []tunnel.CallOption) {
	opts = append(opts, tunnel.WithTimeout(timeout))
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		opts = append(opts, tunnel.WithIdempotencyKey(key))
	}
	receipt, err := h.http.Deliver(ctx, &tunnelv1.DeliverRequest{Request: req}, opts...)
	if err != nil {
		h.fail(w, *id, route, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(RequestIDHeader, receipt.RequestID)
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(map[string]string{"request_id": receipt.RequestID, "idempotency_key": receipt.IdempotencyKey})
}

// writeHead writes an upstream's status and headers, announcing its
// trailers.
func writeHead(w http.ResponseWriter, id string, hs, trailers []*tunnelv1.Header, status int) {
	out := w.Header()
	for name, values := range headers.EndToEnd(headers.FromProto(hs)) {
		out[name] = values
	}
	for _, t := range trailers {
		out.Add("Trailer", t.GetName())
	}
	out.Set(RequestIDHeader, id)
	if status < 100 || status > 999 {
		status = http.StatusBadGateway
	}
	w.WriteHeader(status)
}

func setTrailers(w http.ResponseWriter, trailers []*tunnelv1.Header) {
	for _, t := range trailers {
		for _, v := range t.GetValues() {
			w.Header().Add(t.GetName(), v)
		}
	}
}
