package tunnel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/rprtunnel/rpr/internal/bufpool"
	"github.com/rprtunnel/rpr/internal/store"
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

// Server runs registered services: it reads their request streams through
// the "workers" consumer group, runs handlers with bounded concurrency and
// writes each response to its caller's stream. Create it with NewServer,
// register services with the generated Register functions, then Serve.
type Server struct {
	rdb redis.UniversalClient
	// buffers holds the buffers responses are marshalled into.
	buffers     bufpool.Pool
	opts        ServerOptions
	keys        store.Keyspace
	log         *slog.Logger
	interceptor UnaryServerInterceptor
	// streamInterceptor wraps stream handlers; nil without
	// StreamInterceptors.
	streamInterceptor StreamServerInterceptor
	clock             redisClock
	// dialect is the form of rpr's scripts s's Redis runs, found when
	// Serve loads them (before anything else reads it).
	dialect store.Dialect
	created time.Time
	stats   serverStats
	tracing tracing
	trust   *trustedCallers // nil without ServerOptions.Trust

	mu       sync.Mutex
	services map[string]*serverService
	started  bool
}

// serverService is a registered service.
type serverService struct {
	name    string
	impl    any
	methods map[string]*MethodDesc
	// shards is the service's configured shard count (the proto option,
	// else ServerOptions.Shards, else 1); the count in force may be higher.
	shards int
	// maxBacklog is the service's cap from its proto option, else
	// DefaultMaxBacklog (clients may set another default; this is what the
	// rpr.queue.capacity gauge reports).
	maxBacklog int64
	// streams: the service has streaming methods, so its queues have
	// inboxes.
	streams bool
	// methodNames lists the methods, sorted, for the worker record.
	methodNames []string
	// schema is the service's FileDescriptorSet as published and
	// schemaID its version (wire.SchemaID); both empty without a
	// descriptor (a hand-written ServiceDesc).
	schema   []byte
	schemaID string
	// asyncFastPath: every worker of the service the last heartbeat saw
	// knows the async fast path (wire.Worker.AsyncFastPath), so this one
	// may take it (takesFastPath).
	asyncFastPath atomic.Bool
}

// NewServer returns a Server that serves through rdb. rdb stays the
// caller's: Serve does not close it. Like a Client, the Server reuses the
// memory of the envelopes it writes once the command carrying them has
// returned: a go-redis hook added to rdb must copy any argument it keeps
// after the command returns. Such a hook sees the Server's reads of its
// request streams and stream inbox as *redis.RawWriteToCmd: rpr parses
// their replies itself.
func NewServer(rdb redis.UniversalClient, opts ServerOptions) (*Server, error) {
	if rdb == nil {
		return nil, errors.New("rpr: NewServer: redis client is nil (use tunnel.Open)")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.WorkerID == "" {
		opts.WorkerID = instanceID()
	} else if strings.ContainsAny(opts.WorkerID, "{}: ") {
		return nil, fmt.Errorf("rpr: ServerOptions.WorkerID %q may not contain braces, colons or spaces", opts.WorkerID)
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxMessageBytes
	}
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = DefaultMaxMessageBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	if opts.IdempotencyWindow <= 0 {
		opts.IdempotencyWindow = DefaultIdempotencyWindow
	}
	opts.Retention = max(opts.Retention, 0)
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.MaxDeadLetters == 0 {
		opts.MaxDeadLetters = DefaultMaxDeadLetters
	}
	opts.StreamWindow = opts.StreamWindow.orDefault()
	if opts.RetryPollInterval <= 0 {
		opts.RetryPollInterval = DefaultRetryPollInterval
	}
	opts.Lane = store.LaneOrDefault(opts.Lane)
	if err := wire.ValidateLane(opts.Lane); err != nil {
		return nil, fmt.Errorf("rpr: ServerOptions.Lane: %w", err)
	}
	for name, n := range opts.Shards {
		if err := validShards(n); err != nil {
			return nil, fmt.Errorf("rpr: ServerOptions.Shards[%q]: %w", name, err)
		}
	}
	for _, shard := range opts.OnlyShards {
		if shard < 0 || shard >= MaxShards {
			return nil, fmt.Errorf("rpr: ServerOptions.OnlyShards: shard %d: want 0 to %d", shard, MaxShards-1)
		}
	}
	trust, err := newTrustedCallers(opts.Trust)
	if err != nil {
		return nil, err
	}
	return &Server{
		trust:             trust,
		rdb:               rdb,
		opts:              opts,
		keys:              store.NewKeyspace(opts.Prefix),
		log:               opts.Logger.With("rpr_worker", opts.WorkerID),
		interceptor:       chainServerInterceptors(opts.Interceptors),
		streamInterceptor: chainStreamServerInterceptors(opts.StreamInterceptors),
		created:           time.Now(),
		tracing:           newTracing(opts.TracerProvider, opts.Propagator),
		services:          map[string]*serverService{},
	}, nil
}

// WorkerID returns the id this server's worker uses.
func (s *Server) WorkerID() string { return s.opts.WorkerID }

// RegisterService registers impl as the implementation of desc. Generated
// Register functions call it. It panics on programming errors (nil impl,
// impl not implementing the service, a service registered twice, or
// registration after Serve started), like http.Handle does.
func (s *Server) RegisterService(desc *ServiceDesc, impl any) {
	if desc.Service == nil || desc.Service.Name == "" {
		panic("rpr: RegisterService: ServiceDesc.Service is nil or has no Name (regenerate the code with protoc-gen-rpr)")
	}
	name := desc.Service.Name
	if impl == nil {
		panic(fmt.Sprintf("rpr: RegisterService(%s): implementation is nil", name))
	}
	if desc.HandlerType != nil {
		want := reflect.TypeOf(desc.HandlerType).Elem()
		if got := reflect.TypeOf(impl); !got.Implements(want) {
			panic(fmt.Sprintf("rpr: RegisterService(%s): %v does not implement %v", name, got, want))
		}
	}
	for i := range desc.Methods {
		if m := &desc.Methods[i]; m.Service != desc.Service {
			panic(fmt.Sprintf("rpr: RegisterService(%s): method %s points to another ServiceInfo than the ServiceDesc's; every MethodDesc.Service must be ServiceDesc.Service", name, m.Name))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		panic(fmt.Sprintf("rpr: RegisterService(%s) after Serve: register every service first", name))
	}
	if _, dup := s.services[name]; dup {
		panic(fmt.Sprintf("rpr: RegisterService(%s): service registered twice", name))
	}
	svc := &serverService{
		name:       name,
		impl:       impl,
		methods:    make(map[string]*MethodDesc, len(desc.Methods)),
		shards:     1,
		maxBacklog: DefaultMaxBacklog,
	}
	switch n := s.opts.Shards[name]; {
	case desc.Service.Shards > 0:
		svc.shards = desc.Service.Shards
	case n > 0:
		svc.shards = n
	}
	if desc.Service.MaxBacklog > 0 {
		svc.maxBacklog = desc.Service.MaxBacklog
	}
	for i := range desc.Methods {
		m := &desc.Methods[i]
		switch {
		case m.IsStreaming() && m.StreamHandler == nil:
			panic(fmt.Sprintf("rpr: RegisterService(%s): streaming method %s has no StreamHandler (regenerate the code with protoc-gen-rpr)", name, m.Name))
		case !m.IsStreaming() && m.Handler == nil:
			panic(fmt.Sprintf("rpr: RegisterService(%s): method %s has no Handler", name, m.Name))
		}
		svc.methods[m.Name] = m
		svc.streams = svc.streams || m.IsStreaming()
		svc.methodNames = append(svc.methodNames, m.Name)
	}
	slices.Sort(svc.methodNames)
	svc.schema, svc.schemaID = serviceSchema(name, desc.File, desc.SourceInfo, s.log)
	s.services[name] = svc
}

// Serve runs the registered services until ctx ends, then shuts down
// gracefully: it stops reading new requests, lets the handlers in flight
// finish (each within its call's deadline), writes their responses, removes
// the worker's heartbeat and returns nil (also when ctx ends while it is
// still starting). It returns an error only when it cannot start (no
// services, Redis unreachable). Serve may be called once.
//
// An idle server, too, returns up to min(Lease/4, 1s) after ctx ends: its
// blocking reads are not cut short, since Redis may have handed them
// requests that must then be handled, and they end within that time.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("rpr: Serve called twice")
	}
	s.started = true
	services := make([]*serverService, 0, len(s.services))
	for _, svc := range s.services {
		services = append(services, svc)
	}
	s.mu.Unlock()
	if len(services) == 0 {
		return errors.New("rpr: Serve: no services registered (call a generated Register function first)")
	}

	queues, err := s.prepare(ctx, services)
	if err != nil {
		if ctx.Err() != nil {
			// Asked to stop while starting: nothing ran, nothing to report.
			s.log.Info("rpr: stopped before serving")
			return nil
		}
		return err
	}
	metrics, err := newServerMetrics(s.opts.MeterProvider)
	if err != nil {
		return fmt.Errorf("rpr: server metrics: %w", err)
	}

	run := &serveRun{
		server:      s,
		queues:      &queueSet{},
		slots:       make(chan struct{}, s.opts.Concurrency),
		completions: newBatcher(s.rdb, 2, 64, s.opts.Concurrency, nil),
		completer:   newCompleter(s, s.opts.Concurrency, metrics.batchObserver("complete")),
		// One flush in flight: a stream's frames leave in order.
		frames:      newBatcher(s.rdb, 1, 512, 4096, metrics.batchObserver("frames")),
		observeRead: metrics.batchObserver("read"),
		metrics:     metrics,
		handoffs:    make(chan wire.Handoff, handoffQueue),
	}
	run.pool = newHandlerPool(run.runJob)
	// Readers and reclaimers stop taking requests when ctx ends; the
	// goroutines that serve running handlers (heartbeat, lease extension,
	// cancellation) stop once the last handler has finished.
	var helpers sync.WaitGroup
	handlersDone := make(chan struct{})
	run.queues.expect(len(queues))
	for _, q := range queues {
		run.serveQueue(ctx, q)
	}
	followShards := func(svc *serverService, shards int) { run.followShards(ctx, svc, shards) }
	helpers.Go(func() { s.heartbeatLoop(handlersDone, services, run.queues, followShards) })
	helpers.Go(func() { run.extendLeases(handlersDone) })
	helpers.Go(func() { run.watchCancellations(handlersDone, services) })
	helpers.Go(func() { run.watchCallers(handlersDone) })
	var intake sync.WaitGroup // what hands requests to handlers besides the queues' readers
	intake.Go(func() { run.takeHandoffs(ctx) })

	<-ctx.Done()
	s.log.Info("rpr: shutting down: no new requests; finishing those in flight")
	run.queues.stop()
	intake.Wait()
	// Streams have no end of their own to wait for: end them, and let
	// their callers open them again elsewhere.
	for _, ss := range run.streams.list() {
		ss.cancel(errServerStopping)
	}
	run.streamHandlers.Wait()
	run.handlers.Wait()
	run.pool.close()
	close(handlersDone)
	helpers.Wait()
	run.frames.close()
	run.completions.close()
	run.completer.close()
	s.removeHeartbeats(services, run.queues.list())
	s.log.Info("rpr: stopped")
	return nil
}

// prepare agrees on each service's shard count, creates the consumer
// groups, loads the scripts and announces the worker, so clients see it
// before Serve reads anything. It returns the queues to read.
func (s *Server) prepare(ctx context.Context, services []*serverService) ([]*queue, error) {
	dialect, err := store.LoadScripts(ctx, s.rdb)
	if err != nil {
		return nil, fmt.Errorf("rpr: %w", err)
	}
	s.dialect = dialect
	if dialect != store.DialectFlags {
		s.log.Warn("rpr: this Redis runs no script flags (Redis 6.2, or a server that emulates Redis): at its maxmemory it refuses heartbeats, claims and completions like any write; use Redis 7 to keep serving there", "dialect", dialect)
	}
	var queues []*queue
	for _, svc := range services {
		count, err := raiseShards(ctx, s.rdb, s.keys, svc.name, svc.shards)
		if err != nil {
			return nil, fmt.Errorf("rpr: %w", err)
		}
		if count != svc.shards {
			s.log.Info("rpr: the service has more shards recorded in Redis than configured here; reading them all", "service", svc.name, "configured", svc.shards, "recorded", count)
		}
		for _, shard := range s.shardsToRead(count) {
			q := s.newQueue(svc, shard)
			if err := s.openQueue(ctx, q); err != nil {
				return nil, err
			}
			queues = append(queues, q)
		}
	}
	if err := checkPool(s.rdb, len(queues), "Serve"); err != nil {
		return nil, err
	}
	s.publishSchemas(ctx, services) // before the first beat: a live worker's schema is there
	if err := s.heartbeat(ctx, services, queues, nil); err != nil {
		return nil, fmt.Errorf("rpr: first heartbeat: %w", err)
	}
	return queues, nil
}

// RequestIDFromContext returns the id of the call a handler is serving, for
// logs and traces; "" outside a handler.
func RequestIDFromContext(ctx context.Context) string {
	if h := handlerInfoFrom(ctx); h != nil {
		return h.id
	}
	return ""
}

// AttemptFromContext returns which attempt of its request a handler is
// running: 1 for the first, 2 for the first retry and so on (an async
// request replayed from the dead-letter stream starts again at 1); 0
// outside a handler.
func AttemptFromContext(ctx context.Context) int {
	if h := handlerInfoFrom(ctx); h != nil {
		return h.attempt
	}
	return 0
}

// IdempotencyKeyFromContext returns the idempotency key of the async
// request a handler is running (the request id unless the caller set one
// with WithIdempotencyKey); "" outside an async handler. A handler whose
// effect lives in another system can record the key there, to make the
// effect itself idempotent.
func IdempotencyKeyFromContext(ctx context.Context) string {
	if h := handlerInfoFrom(ctx); h != nil {
		return h.idempotencyKey
	}
	return ""
}
