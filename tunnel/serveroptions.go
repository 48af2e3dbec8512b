package tunnel

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/rprtunnel/rpr/internal/wire"
)

// ServerOptions configure a Server. The zero value works.
type ServerOptions struct {
	// Concurrency bounds the handlers running at once across all services
	// (default DefaultConcurrency, 64). The server reads no more requests than it has free
	// slots, so what it cannot run yet stays in Redis for other workers.
	Concurrency int
	// BatchSize is the most requests taken in one read (default
	// DefaultBatchSize, 64).
	BatchSize int
	// WorkerID names this worker in the consumer group, heartbeats and logs
	// (default host-pid-random). Two live workers must not share an id.
	WorkerID string
	// Prefix starts every key (default DefaultPrefix). Client and server
	// must agree.
	Prefix string
	// MaxRequestBytes and MaxResponseBytes limit payload sizes (default
	// DefaultMaxMessageBytes).
	MaxRequestBytes  int
	MaxResponseBytes int
	// Interceptors wrap every unary and async handler; the first is the
	// outermost.
	Interceptors []UnaryServerInterceptor
	// StreamInterceptors wrap every streaming handler; the first is the
	// outermost.
	StreamInterceptors []StreamServerInterceptor
	// StreamWindow is the flow-control window this server grants the
	// callers of its streaming calls (default DefaultStreamWindow): a
	// caller's Send blocks once that much of its stream is sent and not
	// yet received by the handler.
	StreamWindow StreamWindow
	// MaxStreams bounds the streaming calls this server runs at once
	// (default DefaultMaxStreams). A stream's handler runs on a goroutine
	// of its own, not in one of the Concurrency slots: watch-style streams
	// may stay open for hours. A stream beyond the bound is refused with
	// RESOURCE_EXHAUSTED.
	MaxStreams int
	// MaxDeadLetters caps each dead-letter stream (one per service shard)
	// at this many entries (default DefaultMaxDeadLetters; negative: no
	// cap). At the cap nothing is dropped or trimmed: an async request
	// that would be dead-lettered is held in its retry set, not run again,
	// and dead-lettered once an operator makes room (`rpr dlq replay` or
	// `drop`); an entry that cannot be read stays pending until then.
	// Each hold is logged and counted (ServerStats.DeadLettersHeld,
	// rpr.server.dead_letters.held).
	MaxDeadLetters int
	// Logger receives the server's log lines (default slog.Default()).
	Logger *slog.Logger
	// Lease is how long a worker's claim on a running request holds
	// without renewal (default DefaultLease, 5s). A worker renews the leases of its
	// running handlers every Lease/3, so a live handler is never taken over
	// however long it runs. When a worker dies, others take its requests
	// over once its leases have expired and it has missed heartbeats for as
	// long (at least 3s), found by a scan every min(Lease/4, 1s): with the
	// default, about 5-6s after the crash. Shorter leases recover faster
	// but make a worker that stalls (GC, a frozen VM, a slow Redis) for
	// longer than Lease lose its requests; 5s keeps recovery well inside
	// typical call deadlines while riding out multi-second stalls.
	Lease time.Duration
	// TracerProvider makes the server's spans (default: the global one).
	// Each request gets a SERVER span, a child of the caller's span, with
	// the time it waited in the queue; handlers see it in their context.
	TracerProvider trace.TracerProvider
	// Propagator reads the caller's trace context from the request's
	// metadata (default: W3C Trace Context).
	Propagator propagation.TextMapPropagator
	// MeterProvider makes the server's instruments (default: the global
	// one, otel.GetMeterProvider): handler duration by method and code,
	// queue wait, requests in flight. The queues' own figures (backlog,
	// pending, dead letters) are a deployment's, not a server's: one `rpr
	// exporter` serves them for all servers.
	MeterProvider metric.MeterProvider
	// IdempotencyWindow is how long the server remembers that an async
	// request's idempotency key succeeded (default DefaultIdempotencyWindow,
	// 24h): within it, another request or delivery with the key is not run
	// again. Each remembered key costs about 280 bytes of Redis memory
	// (used_memory; 152 by MEMORY USAGE), so the cost is about 280 B ×
	// async requests per second × window (1,000 requests/s for 24h: about
	// 24 GB; shorten the window to match the longest time a duplicate can
	// arrive). A request sent with a key of its own (WithIdempotencyKey)
	// costs about 200 bytes more by MEMORY USAGE, for as long: the alias
	// that lets `rpr trace` find it by its request id (152) and the id in
	// its state (about 45); it is written by the script that writes the
	// outcome, so it costs no round trip.
	IdempotencyWindow time.Duration
	// Retention is how long the server keeps a record of each unary call
	// it answers, so that `rpr trace <id>` (admin.Service.Trace) still
	// finds the call after it finished, like asynq's Retention: the
	// method, the worker, when the handler started and returned, the
	// status code and message (its first 256 bytes) and the response's
	// size; never a payload. The record is a string under the request id
	// (rpr:v1:{S}:done:<id>), written by the script that writes the
	// answer, in the same round trip.
	//
	// The default, 0, keeps none: a unary call on the fast path then
	// leaves nothing in Redis once answered (`rpr trace` says so, and that
	// retention is off), which keeps the hot path at its cheapest. A kept
	// call costs Redis one command more (the record's SET, in the answer
	// script), about 8µs more of its CPU and about 320 bytes of used_memory
	// until the record expires: measured with BenchmarkUnaryEchoRetention
	// (echo, 16 callers, redis-server 7.0), 3.15 commands and 21µs of Redis
	// CPU per call with retention off, 4.16 and 29µs with it on. Budget 320
	// bytes × unary calls per second × Retention: at 1,000 calls/s, an hour
	// is about 1.15 GB, five minutes (to look a call up while it is fresh)
	// about 100 MB.
	//
	// Async requests are kept for IdempotencyWindow whatever Retention
	// says (their state is the idempotency key's), and so are streams for
	// a while after they end.
	Retention time.Duration
	// Trust makes the server take requests only from authenticated callers
	// and says what each may call (see Trust). Default nil: requests are
	// not authenticated, anyone who can write to the service's request
	// stream may call every method, and signed requests are refused.
	Trust *Trust
	// RetryPollInterval is how often the server moves due async retries
	// and delayed requests to the queue (default DefaultRetryPollInterval,
	// 250ms): a delayed request runs no earlier than asked and usually
	// within this of it. While nothing waits in the retry set the server
	// looks four times less often, so a delayed request a client adds to
	// an empty set may start up to four intervals late (a second by
	// default); retries the server writes itself are moved on time.
	RetryPollInterval time.Duration
	// Lane is the lane this server serves (default DefaultLane): it reads
	// only the requests that the services' routing tables send to this
	// lane (see admin.Routes and `rpr routes`), e.g. "v2" for a new version
	// taking a slice of the traffic: 1-32 characters of a-z, 0-9, '.', '_'
	// and '-', starting with a letter or digit.
	Lane string
	// Shards sets, by service name, how many shards a service has when its
	// proto sets no (rpr.v1.service).shards. The count recorded in Redis
	// wins when it is higher: servers read every shard of it.
	Shards map[string]int
	// OnlyShards, when set, makes the server read only these shards of
	// each sharded service (e.g. []int{0, 1}), so that shards can be
	// assigned to groups of servers. Default: every shard.
	OnlyShards []int
}

// deadAfter is how long a worker may stay silent (no heartbeat) before
// other workers take over its requests whose leases have expired: at least
// three missed beats, so one slow beat does not condemn a live worker.
func (s *Server) deadAfter() time.Duration {
	return max(s.opts.Lease, 3*wire.BeatInterval)
}
