package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/headers"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	tunnelv1 "github.com/rprtunnel/rpr/gen/rpr/tunnel/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

// httpForwarder serves rpr.tunnel.v1.HTTP.
type httpForwarder struct {
	tunnelv1.UnimplementedHTTPServer
	opts   Options
	client *http.Client
	limits limits
}

func newHTTPForwarder(opts Options) *httpForwarder {
	transport := &http.Transport{
		Proxy:                 nil, // upstreams are reached directly, never through $HTTP_PROXY
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       opts.TLS,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &httpForwarder{opts: opts, client: &http.Client{
		Transport: transport,
		// A proxy relays redirects; the caller decides to follow them.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (f *httpForwarder) close() { f.client.CloseIdleConnections() }

// Forward implements tunnelv1.HTTPServer: the upstream's whole response.
func (f *httpForwarder) Forward(ctx context.Context, in *tunnelv1.ForwardRequest) (*tunnelv1.ForwardResponse, error) {
	ex, err := f.send(ctx, in.GetRequest())
	if err != nil {
		return nil, err
	}
	defer ex.done()
	body, err := io.ReadAll(io.LimitReader(ex.resp.Body, int64(f.opts.MaxResponseBytes)+1))
	switch {
	case err != nil:
		return nil, ex.broke(err, len(body))
	case len(body) > f.opts.MaxResponseBytes:
		return nil, upstreamError(ex.route, true, tunnel.Errorf(tunnel.ResourceExhausted,
			"rpr egress: route %s: the upstream's response body is over %d bytes, more than one message holds; make it a stream route (rpr upstreams set %s --mode stream)",
			ex.route.Name, f.opts.MaxResponseBytes, ex.route.Name))
	}
	return &tunnelv1.ForwardResponse{
		Status:   int32(ex.resp.StatusCode),
		Headers:  headers.ToProto(headers.EndToEnd(ex.resp.Header)),
		Body:     body,
		Trailers: headers.ToProto(ex.resp.Trailer),
	}, nil
}

// streamChunk bounds one part of a streamed body.
const streamChunk = 64 << 10

// ForwardStream implements tunnelv1.HTTPServer: the upstream's status and
// headers at once, then its body as it arrives.
func (f *httpForwarder) ForwardStream(in *tunnelv1.ForwardStreamRequest, stream tunnelv1.HTTP_ForwardStreamServer) error {
	ex, err := f.send(stream.Context(), in.GetRequest())
	if err != nil {
		return err
	}
	defer ex.done()
	if err := stream.Send(&tunnelv1.ForwardStreamResponse{
		Status:  int32(ex.resp.StatusCode),
		Headers: headers.ToProto(headers.EndToEnd(ex.resp.Header)),
	}); err != nil {
		return err
	}
	buf := make([]byte, streamChunk)
	total := 0
	for {
		n, err := ex.resp.Body.Read(buf)
		if n > 0 {
			total += n
			if serr := stream.Send(&tunnelv1.ForwardStreamResponse{Body: bytes.Clone(buf[:n])}); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return ex.broke(err, total)
		}
	}
	if len(ex.resp.Trailer) > 0 {
		return stream.Send(&tunnelv1.ForwardStreamResponse{Trailers: headers.ToProto(ex.resp.Trailer)})
	}
	return nil
}

// Deliver implements tunnelv1.HTTPServer for requests whose callers do
// not wait: a 2xx or 3xx answer succeeds; 408, 425, 429 and 5xx answers
// and failures to reach the upstream are retried (UNAVAILABLE); any
// other 4xx is dead-lettered at once (Permanent), with the upstream's
// answer in the reason.
func (f *httpForwarder) Deliver(ctx context.Context, in *tunnelv1.DeliverRequest) error {
	ex, err := f.send(ctx, in.GetRequest())
	if err != nil {
		return err
	}
	defer ex.done()
	snippet, _ := io.ReadAll(io.LimitReader(ex.resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(ex.resp.Body, 1<<20)) // reuse the connection
	status := ex.resp.StatusCode
	answer := fmt.Sprintf("the upstream %s answered %d %s: %q", ex.route.Upstream, status, http.StatusText(status), strings.TrimSpace(string(snippet)))
	switch {
	case status < 400:
		return nil
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests, status >= 500:
		return upstreamError(ex.route, true, tunnel.Errorf(tunnel.Unavailable, "rpr egress: route %s: %s; retried", ex.route.Name, answer))
	}
	return tunnel.Permanent(upstreamError(ex.route, true, tunnel.Errorf(tunnel.FailedPrecondition,
		"rpr egress: route %s: %s; not retried: a 4xx answer refuses the request itself", ex.route.Name, answer)))
}

// exchange is one request sent upstream and its response, holding a slot
// of the route's upstream until done.
type exchange struct {
	route   *upstream.Route
	resp    *http.Response
	release func()
}

func (ex *exchange) done() {
	ex.resp.Body.Close()
	ex.release()
}

// broke explains a response that failed after n bytes of its body.
func (ex *exchange) broke(err error, n int) error {
	return upstreamError(ex.route, true, tunnel.Errorf(tunnel.Unavailable,
		"rpr egress: route %s: the upstream's response broke after %d bytes of its body: %v; the upstream did receive the request", ex.route.Name, n, err))
}

// send matches in against the table, waits for a slot of the route's
// upstream and sends the request, bounded by ctx's deadline.
func (f *httpForwarder) send(ctx context.Context, in *tunnelv1.HTTPRequest) (*exchange, error) {
	// Checked here, where the upstream is chosen, whatever the ingress
	// did: anyone who can write to Redis can send a request.
	path, err := upstream.DecodePath(in.GetPath())
	if err != nil {
		return nil, tunnel.Errorf(tunnel.InvalidArgument, "rpr egress: %v", err)
	}
	route, ok := f.opts.HTTPRoutes().Match(in.GetHost(), in.GetPath())
	if !ok {
		return nil, noRoute(in.GetHost(), in.GetPath())
	}
	req, err := f.upstreamRequest(ctx, route, in, path)
	if err != nil {
		return nil, err
	}
	release, err := f.limits.acquire(ctx, route)
	if err != nil {
		return nil, err
	}
	var sent atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteHeaders: func() { sent.Store(true) },
	}))
	resp, err := f.client.Do(req)
	if err != nil {
		release()
		return nil, f.failed(ctx, route, sent.Load(), err)
	}
	return &exchange{route: route, resp: resp, release: release}, nil
}

// upstreamRequest builds the request to route's upstream: the caller's
// method, path (under the upstream's; path is in's, decoded by
// upstream.DecodePath), query, end-to-end headers and body, with
// X-Forwarded-*, the request id, the trace context and the count of
// tunnels crossed (upstream.HopsHeader).
func (f *httpForwarder) upstreamRequest(ctx context.Context, route *upstream.Route, in *tunnelv1.HTTPRequest, path string) (*http.Request, error) {
	escaped := in.GetPath()
	target := *route.Target()
	target.Path = route.UpstreamPath(path)
	if escaped != path {
		target.RawPath = route.UpstreamPath(escaped)
	}
	target.RawQuery = in.GetQuery()
	req, err := http.NewRequestWithContext(ctx, in.GetMethod(), target.String(), bytes.NewReader(in.GetBody()))
	if err != nil {
		return nil, tunnel.Errorf(tunnel.InvalidArgument, "rpr egress: route %s: %v", route.Name, err)
	}
	req.Header = headers.EndToEnd(headers.FromProto(in.GetHeaders()))
	req.Header.Set(upstream.HopsHeader, upstream.NextHops(req.Header.Get(upstream.HopsHeader)))
	if host, _, err := net.SplitHostPort(in.GetRemoteAddr()); err == nil {
		prior := strings.Join(req.Header.Values("X-Forwarded-For"), ", ")
		if prior != "" {
			host = prior + ", " + host
		}
		req.Header.Set("X-Forwarded-For", host)
	}
	req.Header.Set("X-Forwarded-Host", in.GetHost())
	if in.GetScheme() != "" {
		req.Header.Set("X-Forwarded-Proto", in.GetScheme())
	}
	if id := tunnel.RequestIDFromContext(ctx); id != "" {
		req.Header.Set("X-Rpr-Request-Id", id)
		if req.Header.Get("X-Request-Id") == "" {
			req.Header.Set("X-Request-Id", id)
		}
	}
	if key := tunnel.IdempotencyKeyFromContext(ctx); key != "" && req.Header.Get("Idempotency-Key") == "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Del("Traceparent")
	req.Header.Del("Tracestate")
	f.opts.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	return req, nil
}

// failed explains a request that got no response.
func (f *httpForwarder) failed(ctx context.Context, route *upstream.Route, sent bool, err error) error {
	f.opts.Log.Warn("rpr egress: upstream request failed", "route", route.Name, "upstream", route.Upstream, "sent", sent, "error", err, "request_id", tunnel.RequestIDFromContext(ctx))
	outcome := "it was not sent"
	if sent {
		outcome = "the upstream may have received it"
	}
	if ctx.Err() != nil {
		return upstreamError(route, sent, tunnel.Errorf(tunnel.CodeOf(ctx.Err()),
			"rpr egress: route %s: no answer from %s within the deadline; %s", route.Name, route.Upstream, outcome))
	}
	return upstreamError(route, sent, tunnel.Errorf(tunnel.Unavailable,
		"rpr egress: route %s: %s: %v; %s", route.Name, route.Upstream, err, outcome))
}

// noRoute is a request none of the egress's routes takes.
func noRoute(host, path string) error {
	e := tunnel.Errorf(tunnel.NotFound, "rpr egress: no upstream route takes host %q path %q (rpr upstreams ls)", host, path)
	with, derr := e.WithDetails(&errdetails.ErrorInfo{Reason: ReasonNoRoute, Domain: ErrorDomain})
	if derr != nil {
		return e
	}
	return with
}
