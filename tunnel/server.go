package tunnel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
)

// ServerOptions configure a Server. The zero value works.
type ServerOptions struct {
	// Concurrency bounds the handlers running at once across all services
	// (default 64). The server reads no more requests than it has free
	// slots, so what it cannot run yet stays in Redis for other workers.
	Concurrency int
	// BatchSize is the most requests taken in one read (default 64).
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
	// Interceptors wrap every handler; the first is the outermost.
	Interceptors []UnaryServerInterceptor
	// Logger receives the server's log lines (default slog.Default()).
	Logger *slog.Logger
}

// deadLetterCap bounds the dead-letter stream (approximately); the DLQ is
// for an operator to inspect, not an unbounded archive.
const deadLetterCap = 100_000

// Server runs registered services: it reads their request streams through
// the "workers" consumer group, runs handlers with bounded concurrency and
// writes each response to its caller's stream. Create it with NewServer,
// register services with the generated Register functions, then Serve.
type Server struct {
	rdb         redis.UniversalClient
	opts        ServerOptions
	keys        keyspace
	log         *slog.Logger
	interceptor UnaryServerInterceptor
	clock       redisClock
	created     time.Time

	mu       sync.Mutex
	services map[string]*serverService
	started  bool
}

// serverService is a registered service.
type serverService struct {
	name     string
	impl     any
	methods  map[string]*MethodDesc
	requests string // request stream key
}

// NewServer returns a Server that serves through rdb. rdb stays the
// caller's: Serve does not close it.
func NewServer(rdb redis.UniversalClient, opts ServerOptions) (*Server, error) {
	if rdb == nil {
		return nil, errors.New("rpr: NewServer: redis client is nil (use tunnel.Open)")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 64
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 64
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
	return &Server{
		rdb:         rdb,
		opts:        opts,
		keys:        keyspace{prefix: opts.Prefix},
		log:         opts.Logger.With("rpr_worker", opts.WorkerID),
		interceptor: chainServerInterceptors(opts.Interceptors),
		created:     time.Now(),
		services:    map[string]*serverService{},
	}, nil
}

// WorkerID returns the id this server's worker uses.
func (s *Server) WorkerID() string { return s.opts.WorkerID }

// RegisterService registers impl as the implementation of desc. Generated
// Register functions call it. It panics on programming errors (nil impl,
// impl not implementing the service, a service registered twice, or
// registration after Serve started), like http.Handle does.
func (s *Server) RegisterService(desc *ServiceDesc, impl any) {
	if impl == nil {
		panic(fmt.Sprintf("rpr: RegisterService(%s): implementation is nil", desc.ServiceName))
	}
	if desc.HandlerType != nil {
		want := reflect.TypeOf(desc.HandlerType).Elem()
		if got := reflect.TypeOf(impl); !got.Implements(want) {
			panic(fmt.Sprintf("rpr: RegisterService(%s): %v does not implement %v", desc.ServiceName, got, want))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		panic(fmt.Sprintf("rpr: RegisterService(%s) after Serve: register every service first", desc.ServiceName))
	}
	if _, dup := s.services[desc.ServiceName]; dup {
		panic(fmt.Sprintf("rpr: RegisterService(%s): service registered twice", desc.ServiceName))
	}
	svc := &serverService{
		name:     desc.ServiceName,
		impl:     impl,
		methods:  make(map[string]*MethodDesc, len(desc.Methods)),
		requests: s.keys.requests(desc.ServiceName),
	}
	for i := range desc.Methods {
		svc.methods[desc.Methods[i].Name] = &desc.Methods[i]
	}
	s.services[desc.ServiceName] = svc
}

// Serve runs the registered services until ctx ends, then shuts down
// gracefully: it stops reading new requests, lets the handlers in flight
// finish (each within its call's deadline), writes their responses, removes
// the worker's heartbeat and returns nil. It returns an error only when it
// cannot start (no services, Redis unreachable). Serve may be called once.
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

	if err := s.prepare(ctx, services); err != nil {
		return err
	}

	run := &serveRun{
		server:      s,
		slots:       make(chan struct{}, s.opts.Concurrency),
		completions: newBatcher(s.rdb, 4, 256, s.opts.Concurrency),
		running:     map[string]context.CancelCauseFunc{},
	}
	cancels := make(chan struct{})
	go func() {
		defer close(cancels)
		run.watchCancellations(ctx, services)
	}()
	var readers sync.WaitGroup
	for _, svc := range services {
		readers.Add(1)
		go func() {
			defer readers.Done()
			run.readRequests(ctx, svc)
		}()
		s.log.Info("rpr: serving "+svc.name, "stream", svc.requests, "concurrency", s.opts.Concurrency)
	}
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		s.heartbeatLoop(ctx, services)
	}()

	<-ctx.Done()
	s.log.Info("rpr: shutting down: no new requests; finishing those in flight")
	readers.Wait()
	run.handlers.Wait()
	run.completions.close()
	<-beats
	<-cancels
	s.removeHeartbeats(services)
	s.log.Info("rpr: stopped")
	return nil
}

// prepare creates the consumer groups, loads the scripts and announces the
// worker, so clients see it before Serve reads anything.
func (s *Server) prepare(ctx context.Context, services []*serverService) error {
	for _, svc := range services {
		// "0": a new group delivers what is already queued; nothing is lost.
		err := s.rdb.XGroupCreateMkStream(ctx, svc.requests, workersGroup, "0").Err()
		if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return fmt.Errorf("rpr: create consumer group %s on %s: %w", workersGroup, svc.requests, err)
		}
	}
	for _, script := range allScripts {
		if err := script.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("rpr: load Lua scripts: %w", err)
		}
	}
	if err := s.heartbeat(ctx, services); err != nil {
		return fmt.Errorf("rpr: first heartbeat: %w", err)
	}
	return nil
}

// heartbeat stamps this worker as live for every service in one round trip.
func (s *Server) heartbeat(ctx context.Context, services []*serverService) error {
	info, err := json.Marshal(s.workerInfo())
	if err != nil {
		return err
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(services))
	sentAt := time.Now()
	for i, svc := range services {
		cmds[i] = heartbeatScript.EvalSha(ctx, pipe, []string{s.keys.workers(svc.name)}, s.opts.WorkerID, info, pruneAge.Milliseconds())
	}
	_, _ = pipe.Exec(ctx)
	received := time.Now()
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			cmds[i] = heartbeatScript.Eval(ctx, s.rdb, []string{s.keys.workers(services[i].name)}, s.opts.WorkerID, info, pruneAge.Milliseconds())
		}
		if err := cmds[i].Err(); err != nil {
			return err
		}
	}
	redisNow, err := parseRedisTime(cmds[0].Val())
	if err != nil {
		return fmt.Errorf("heartbeat reply: %w", err)
	}
	s.clock.observe(redisNow, sentAt, received)
	return nil
}

func (s *Server) workerInfo() workerInfo {
	host, _ := os.Hostname()
	return workerInfo{Host: host, PID: os.Getpid(), Started: s.created.UnixMilli()}
}

func (s *Server) heartbeatLoop(ctx context.Context, services []*serverService) {
	t := time.NewTicker(heartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		beatCtx, cancel := context.WithTimeout(ctx, 2*heartbeatInterval)
		if err := s.heartbeat(beatCtx, services); err != nil && ctx.Err() == nil {
			s.log.Warn("rpr: heartbeat failed; clients may see this worker as gone", "error", err)
		}
		cancel()
	}
}

// removeHeartbeats tells clients at once that this worker is gone.
func (s *Server) removeHeartbeats(services []*serverService) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, svc := range services {
		if err := s.rdb.HDel(ctx, s.keys.workers(svc.name), s.opts.WorkerID).Err(); err != nil {
			s.log.Warn("rpr: remove heartbeat", "service", svc.name, "error", err)
		}
	}
}

// serveRun is the state of one Serve call.
type serveRun struct {
	server      *Server
	slots       chan struct{} // one token per running handler
	handlers    sync.WaitGroup
	completions *batcher

	mu      sync.Mutex
	running map[string]context.CancelCauseFunc // request id -> its handler's cancel
}

// errCallerCancelled is the cause of a handler context cancelled because
// its caller cancelled the call.
var errCallerCancelled = errors.New("rpr: the caller cancelled the call")

// watchCancellations cancels running handlers whose callers announce that
// they gave up (see Client.announceCancel), until ctx ends.
func (r *serveRun) watchCancellations(ctx context.Context, services []*serverService) {
	channels := make([]string, len(services))
	for i, svc := range services {
		channels[i] = r.server.keys.cancels(svc.name)
	}
	sub := r.server.rdb.Subscribe(ctx, channels...)
	defer sub.Close()
	msgs := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-msgs:
			if !ok {
				return
			}
			r.mu.Lock()
			cancel := r.running[msg.Payload]
			r.mu.Unlock()
			if cancel != nil {
				r.server.log.Info("rpr: caller cancelled; cancelling its handler", "request_id", msg.Payload)
				cancel(errCallerCancelled)
			}
		}
	}
}

// track registers a running handler's cancel function under its request
// id; the returned func unregisters it.
func (r *serveRun) track(id string, cancel context.CancelCauseFunc) func() {
	r.mu.Lock()
	r.running[id] = cancel
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.running, id)
		r.mu.Unlock()
	}
}

// readRequests takes requests of svc in batches, never more than there are
// free handler slots, and starts a handler for each.
func (r *serveRun) readRequests(ctx context.Context, svc *serverService) {
	s := r.server
	backoff := newBackoff(50*time.Millisecond, 2*time.Second)
	// Reads are not cancelled mid-flight: entries Redis hands out must be
	// handled, so each read ends by its short block time instead.
	readCtx := context.WithoutCancel(ctx)
	for {
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		slots := 1
		for slots < s.opts.BatchSize && r.tryTakeSlot() {
			slots++
		}
		streams, err := s.rdb.XReadGroup(readCtx, &redis.XReadGroupArgs{
			Group:    workersGroup,
			Consumer: s.opts.WorkerID,
			Streams:  []string{svc.requests, ">"},
			Count:    int64(slots),
			Block:    time.Second,
		}).Result()
		var msgs []redis.XMessage
		for _, st := range streams {
			msgs = append(msgs, st.Messages...)
		}
		for range slots - len(msgs) {
			<-r.slots
		}
		switch {
		case err == nil:
			backoff.reset()
		case errors.Is(err, redis.Nil):
		default:
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("rpr: read request stream", "stream", svc.requests, "error", err)
			if isMissingStream(err) {
				gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				if err := s.rdb.XGroupCreateMkStream(gctx, svc.requests, workersGroup, "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
					s.log.Warn("rpr: recreate consumer group", "stream", svc.requests, "error", err)
				}
				cancel()
			}
			backoff.wait(ctx)
		}
		for _, msg := range msgs {
			r.handlers.Add(1)
			go func() {
				defer func() {
					<-r.slots
					r.handlers.Done()
				}()
				r.handle(svc, msg)
			}()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

func (r *serveRun) tryTakeSlot() bool {
	select {
	case r.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// handle processes one stream entry from start to acknowledgement. Nothing
// in an entry can make it panic or stop the server: bad entries are
// answered with an error where possible, dead-lettered and acknowledged.
func (r *serveRun) handle(svc *serverService, msg redis.XMessage) {
	s := r.server
	raw, ok := msg.Values[envelopeField].(string)
	if !ok {
		s.log.Error("rpr: request entry has no envelope field; dead-lettered", "stream", svc.requests, "entry", msg.ID)
		r.deadLetter(svc, msg.ID, "", fmt.Sprintf("entry has no %q field", envelopeField))
		return
	}
	env, err := decodeRequest([]byte(raw))
	if err != nil {
		id, replyTo := peekReplyAddress([]byte(raw))
		s.log.Error("rpr: bad request envelope; dead-lettered", "stream", svc.requests, "entry", msg.ID, "request_id", id, "error", err)
		r.deadLetter(svc, msg.ID, raw, err.Error())
		if id != "" && s.keys.isResponses(svc.name, replyTo) {
			code := InvalidArgument
			var verr errEnvelopeVersion
			if errors.As(err, &verr) {
				code = FailedPrecondition
			}
			r.respond(svc, msg.ID, replyTo, errorResponse(id, Errorf(code, "[%s] %s: %v", id, svc.name, err)))
		}
		return
	}
	log := s.log.With("request_id", env.ID, "method", env.Method)
	if !s.keys.isResponses(svc.name, env.ReplyTo) {
		log.Error("rpr: reply-to is not a response stream of this service; dead-lettered", "reply_to", env.ReplyTo)
		r.deadLetter(svc, msg.ID, raw, fmt.Sprintf("reply-to %q is not a response stream of %s", env.ReplyTo, svc.name))
		return
	}
	deadline := s.clock.toLocal(env.Deadline)
	if !time.Now().Before(deadline) {
		log.Info("rpr: deadline passed before a worker took the request; not executed", "late_by", time.Since(deadline).Round(time.Millisecond))
		r.discard(svc, msg.ID)
		return
	}
	resp := r.call(svc, env, deadline, log)
	r.respond(svc, msg.ID, env.ReplyTo, resp)
}

// call runs the handler for env and builds the response envelope.
func (r *serveRun) call(svc *serverService, env *requestEnvelope, deadline time.Time, log *slog.Logger) *responseEnvelope {
	s := r.server
	serviceName, methodName, _ := strings.Cut(env.Method, "/")
	method, ok := svc.methods[methodName]
	if serviceName != svc.name || !ok {
		log.Warn("rpr: unknown method")
		return errorResponse(env.ID, Errorf(Unimplemented, "[%s] unknown method %s: service %s has no such method on this server (deployed an older version?)", env.ID, env.Method, svc.name))
	}
	if len(env.Payload) > s.opts.MaxRequestBytes {
		log.Warn("rpr: request over the size limit", "bytes", len(env.Payload), "limit", s.opts.MaxRequestBytes)
		return errorResponse(env.ID, Errorf(ResourceExhausted, "[%s] %s: request is %d bytes, over the server's %d-byte limit (ServerOptions.MaxRequestBytes)", env.ID, env.Method, len(env.Payload), s.opts.MaxRequestBytes))
	}

	md := &responseMetadata{}
	ctx := context.WithValue(context.Background(), incomingKey{}, env.Header)
	ctx = context.WithValue(ctx, responseKey{}, md)
	ctx = context.WithValue(ctx, requestIDKey{}, env.ID)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	ctx, cancelCause := context.WithCancelCause(ctx)
	defer cancelCause(nil)
	defer r.track(env.ID, cancelCause)()

	reply, err := r.runHandler(ctx, svc, method, env, log)
	resp := &responseEnvelope{Version: envelopeVersion, ID: env.ID, Header: md.header, Trailer: md.trailer}
	if err == nil {
		resp.Payload, err = proto.Marshal(reply)
		if err != nil {
			err = Errorf(Internal, "[%s] %s: marshal response: %v", env.ID, env.Method, err)
		} else if len(resp.Payload) > s.opts.MaxResponseBytes {
			log.Error("rpr: response over the size limit", "bytes", len(resp.Payload), "limit", s.opts.MaxResponseBytes)
			err = Errorf(ResourceExhausted, "[%s] %s: response is %d bytes, over the server's %d-byte limit (ServerOptions.MaxResponseBytes)", env.ID, env.Method, len(resp.Payload), s.opts.MaxResponseBytes)
		}
	}
	if err != nil {
		errResp := errorResponse(env.ID, err)
		errResp.Header, errResp.Trailer = resp.Header, resp.Trailer
		return errResp
	}
	return resp
}

// runHandler calls the user's handler, turning a panic into INTERNAL.
func (r *serveRun) runHandler(ctx context.Context, svc *serverService, method *MethodDesc, env *requestEnvelope, log *slog.Logger) (reply proto.Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("rpr: handler panicked", "panic", p, "stack", string(debug.Stack()))
			reply, err = nil, Errorf(Internal, "[%s] %s: handler panicked: %v", env.ID, env.Method, p)
		}
	}()
	decode := func(m proto.Message) error {
		if err := proto.Unmarshal(env.Payload, m); err != nil {
			log.Warn("rpr: request payload does not decode", "error", err)
			return Errorf(InvalidArgument, "[%s] %s: request payload is not a valid %s: %v", env.ID, env.Method, m.ProtoReflect().Descriptor().FullName(), err)
		}
		return nil
	}
	reply, err = method.Handler(svc.impl, ctx, decode, r.server.interceptor)
	if err == nil && (reply == nil || !reply.ProtoReflect().IsValid()) {
		err = Errorf(Internal, "[%s] %s: handler returned neither a reply nor an error", env.ID, env.Method)
	}
	return reply, err
}

// errorResponse builds a response carrying err as a status.
func errorResponse(id string, err error) *responseEnvelope {
	e := AsError(err)
	resp := &responseEnvelope{Version: envelopeVersion, ID: id, Code: e.code, Message: e.message}
	if resp.Code == OK { // an *Error with code OK is still a failure
		resp.Code = Unknown
	}
	for _, d := range e.details {
		if b, err := proto.Marshal(d); err == nil {
			resp.Details = append(resp.Details, b)
		}
	}
	return resp
}

// respond writes resp to the caller's stream and acknowledges the request
// in one script, batched with other completions; it returns once that is
// done so that a handler slot covers its completion.
func (r *serveRun) respond(svc *serverService, entryID, replyTo string, resp *responseEnvelope) {
	s := r.server
	raw, err := marshalEnvelope(resp)
	if err != nil {
		s.log.Error("rpr: encode response", "request_id", resp.ID, "error", err)
		return
	}
	r.runScript(&scriptCall{
		script: completeScript,
		keys:   []string{svc.requests, replyTo},
		args:   []any{workersGroup, entryID, raw},
	}, func(cmd redis.Cmder) {
		switch n, err := cmd.(*redis.Cmd).Int(); {
		case err != nil:
			s.log.Error("rpr: write response; the request stays pending", "request_id", resp.ID, "error", err)
		case n == 0:
			s.log.Warn("rpr: caller's response stream is gone (caller exited?); response dropped", "request_id", resp.ID, "reply_to", replyTo)
		}
	})
}

// discard retires an entry without answering it.
func (r *serveRun) discard(svc *serverService, entryID string) {
	r.runScript(&scriptCall{
		script: discardScript,
		keys:   []string{svc.requests},
		args:   []any{workersGroup, entryID},
	}, r.logFailure("discard request entry", entryID))
}

// deadLetter moves an entry to the dead-letter stream with reason.
func (r *serveRun) deadLetter(svc *serverService, entryID, raw, reason string) {
	r.runScript(&scriptCall{
		script: deadLetterScript,
		keys:   []string{svc.requests, r.server.keys.deadLetters(svc.name)},
		args:   []any{workersGroup, entryID, raw, reason, deadLetterCap},
	}, r.logFailure("dead-letter request entry", entryID))
}

func (r *serveRun) logFailure(what, entryID string) func(redis.Cmder) {
	return func(cmd redis.Cmder) {
		if err := cmd.Err(); err != nil {
			r.server.log.Error("rpr: "+what, "entry", entryID, "error", err)
		}
	}
}

// runScript sends call through the completion batcher and waits for it.
func (r *serveRun) runScript(call *scriptCall, done func(redis.Cmder)) {
	finished := make(chan struct{})
	err := r.completions.submit(context.Background(), scriptOp(call, func(cmd redis.Cmder) {
		done(cmd)
		close(finished)
	}))
	if err != nil {
		r.server.log.Error("rpr: completion not sent", "error", err)
		return
	}
	<-finished
}

type requestIDKey struct{}

// RequestIDFromContext returns the id of the call a handler is serving, for
// logs and traces; "" outside a handler.
func RequestIDFromContext(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
