package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"sync"

	"go.opentelemetry.io/otel/propagation"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	tunnelv1 "github.com/rprtunnel/rpr/gen/rpr/tunnel/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

// Options configure an Egress.
type Options struct {
	// HTTPRoutes and GRPCRoutes return the current upstream tables.
	HTTPRoutes, GRPCRoutes func() *upstream.Table
	// Log receives one line per failed forward; nil discards.
	Log *slog.Logger
	// MaxResponseBytes bounds a whole (buffered) HTTP response body;
	// larger ones need a stream route. Default DefaultMaxResponseBytes.
	MaxResponseBytes int
	// TLS configures connections to https:// and grpcs:// upstreams;
	// nil uses the system's roots.
	TLS *tls.Config
	// Propagator writes the trace context into upstream requests;
	// default W3C trace context.
	Propagator propagation.TextMapPropagator
}

// DefaultMaxResponseBytes is the default bound of a buffered response
// body: what fits in one rpr message (4 MiB) with room for the headers.
const DefaultMaxResponseBytes = 4<<20 - 64<<10

// Egress forwards the tunnel services' calls to upstreams.
type Egress struct {
	http *httpForwarder
	grpc *grpcForwarder
}

// Register serves both tunnel services on srv by forwarding; Close the
// Egress after srv has stopped.
func Register(srv *tunnel.Server, opts Options) (*Egress, error) {
	if opts.HTTPRoutes == nil || opts.GRPCRoutes == nil {
		return nil, fmt.Errorf("rpr egress: no upstream tables")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if opts.Propagator == nil {
		opts.Propagator = propagation.TraceContext{}
	}
	e := &Egress{http: newHTTPForwarder(opts), grpc: newGRPCForwarder(opts)}
	tunnelv1.RegisterHTTPServer(srv, e.http)
	tunnelv1.RegisterGRPCServer(srv, e.grpc)
	return e, nil
}

// Close releases the upstream connections.
func (e *Egress) Close() {
	e.http.close()
	e.grpc.close()
}

// limits bounds the requests in flight to each route's upstream
// (upstream.Route.Concurrency).
type limits struct {
	mu    sync.Mutex
	slots map[slotKey]chan struct{}
}

// slotKey names one upstream's slots: a route changed in any of these
// gets slots of its own.
type slotKey struct {
	route, upstream string
	concurrency     int
}

// acquire takes a slot of r's upstream, waiting while ctx allows.
func (l *limits) acquire(ctx context.Context, r *upstream.Route) (release func(), err error) {
	key := slotKey{r.Name, r.Upstream, r.Concurrency}
	l.mu.Lock()
	if l.slots == nil {
		l.slots = map[slotKey]chan struct{}{}
	}
	slots, ok := l.slots[key]
	if !ok {
		slots = make(chan struct{}, r.Concurrency)
		l.slots[key] = slots
	}
	l.mu.Unlock()
	select {
	case slots <- struct{}{}:
		return func() { <-slots }, nil
	case <-ctx.Done():
		return nil, upstreamError(r, false, tunnel.NewError(tunnel.CodeOf(ctx.Err()),
			fmt.Errorf("rpr egress: route %s: all %d connections to %s busy until the deadline; not sent (raise the route's concurrency)", r.Name, r.Concurrency, r.Upstream)))
	}
}
