package tunnel

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ClientOptions configure a Client. The zero value works.
type ClientOptions struct {
	// BizCode is the four-character business code placed in request ids
	// (A-Z, 0-9), e.g. "ORD1". A service's (rpr.v1.service).biz_code takes
	// precedence; when neither is set, a code is derived from the service
	// name.
	BizCode string
	// ID names this client instance in key names and logs. Default:
	// host-pid-random. Two live clients must not share an id.
	ID string
	// Prefix starts every key (default DefaultPrefix). Client and server
	// must agree.
	Prefix string
	// DefaultTimeout bounds calls whose context has no deadline and whose
	// method sets no timeout (default DefaultCallTimeout, 30s). Every call
	// through Redis has a deadline, so a request never waits in a queue
	// forever.
	DefaultTimeout time.Duration
	// MaxRequestBytes and MaxResponseBytes limit payload sizes (default
	// DefaultMaxMessageBytes).
	MaxRequestBytes  int
	MaxResponseBytes int
	// Interceptors wrap every unary call; the first is the outermost.
	Interceptors []UnaryClientInterceptor
	// StreamInterceptors wrap the opening of every streaming call; the
	// first is the outermost.
	StreamInterceptors []StreamClientInterceptor
	// StreamWindow is the flow-control window this client grants the
	// servers of its streaming calls (default DefaultStreamWindow: 64
	// messages, 1 MiB): a server's Send blocks once that much of its
	// stream is sent and not yet received.
	StreamWindow StreamWindow
	// Logger receives the client's log lines (default slog.Default()).
	Logger *slog.Logger
	// TracerProvider makes the client's spans (default: the global one,
	// otel.GetTracerProvider). Each call gets a CLIENT span whose context
	// travels with the request, so the server's span is its child.
	TracerProvider trace.TracerProvider
	// Propagator writes the trace context into the request's metadata
	// (default: W3C Trace Context). Servers must use the same format.
	Propagator propagation.TextMapPropagator
	// MeterProvider makes the client's instruments (default: the global
	// one): call duration by method and code, and calls in flight.
	MeterProvider metric.MeterProvider
	// MaxInFlight bounds the calls (unary calls and async enqueues) this
	// client has in flight at once (default DefaultMaxInFlight, 4096).
	// Further calls wait for a slot as long as their context allows; the
	// wait is the rpr.client.slot_wait histogram.
	MaxInFlight int
	// MaxBacklog caps the queue of services whose proto sets no
	// (rpr.v1.service).max_backlog (default DefaultMaxBacklog): requests
	// waiting in the service's stream plus its retry set.
	MaxBacklog int64
	// BacklogWatermark is the share of the cap at which calls are refused
	// with RESOURCE_EXHAUSTED and a retry-after hint (default
	// DefaultBacklogWatermark, 0.85). It is checked against a backlog
	// figure refreshed every second, so it costs no round trip per call.
	BacklogWatermark float64
	// LimitKey names the caller of each call for the service's rate limits
	// (see LimitRule and `rpr limits`): the key the limits count under, and
	// the tier that picks the rules. Default DefaultLimitKey: the
	// x-rpr-caller and x-rpr-tier request headers. An empty key counts the
	// call under this client's ID, an empty tier is DefaultTier ("normal").
	// It is called only for calls some rule of the service may apply to.
	LimitKey LimitKeyFunc
	// Breaker configures the circuit breakers, one per service and one
	// around Redis, that fail calls at once while the service or Redis is
	// down (default: on; 5 consecutive failures open one, 5s cool-down, 1
	// half-open probe). See BreakerOptions.
	Breaker BreakerOptions
	// Shards sets, by service name, how many shards this client expects a
	// service to have when its proto sets no (rpr.v1.service).shards. The
	// count recorded in Redis (by the servers, or `rpr shards set`) is the
	// one followed; a client never raises it, and logs a warning when it
	// expects more.
	Shards map[string]int
	// Credentials sign every request with a secret this client's caller
	// shares with the servers (and, with Seal, encrypt them), so that the
	// servers know who calls and the client knows who answers (see
	// Credentials and ServerOptions.Trust). Default nil: requests are not
	// signed. With Credentials the rate limits count this client's calls
	// under Credentials.Caller, whatever LimitKey says the key is.
	Credentials *Credentials
}
