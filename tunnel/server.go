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

	"github.com/rprtunnel/rpr/internal/bufpool"
	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// Server runs registered services: it reads their request streams through
// the "workers" consumer group, runs handlers with bounded concurrency and
// writes each response to its caller's stream. Create it with NewServer,
// register services with the generated Register functions, then Serve.
type Server struct {
	rdb redis.UniversalClient
	// buffers holds the buffers responses are marshalled into, and those
	// large requests are read into (see lendingReader).
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
		// One flush in flight: a stream's frames leave in order.
		frames:      newBatcher(s.rdb, 1, 512, 4096, metrics.batchObserver("frames")),
		observeRead: metrics.batchObserver("read"),
		metrics:     metrics,
		handoffs:    make(chan wire.Handoff, handoffQueue),
	}
	run.completer = newCompleter(s, s.opts.Concurrency, metrics.batchObserver("complete"), run.completionWritten)
	run.pool = newHandlerPool(run.runJob, handlerIdle)
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
