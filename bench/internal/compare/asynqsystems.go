package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

// The task both systems carry: rpr's rprbench.Jobs/Do, an async method,
// and asynq's task type rprbench:job, each with a BytesValue payload.
const (
	jobsService   = "rprbench.Jobs"
	jobsMethod    = "Do"
	asynqTaskType = "rprbench:job"
	// stopBound bounds how long a system may take to stop.
	stopBound = 30 * time.Second
)

// ---- rpr ----

// rprAsync is an rpr server of a one-method async service and a client
// enqueueing to it, each with its own connection pool, as two deployments
// would be.
type rprAsync struct {
	serverRedis, clientRedis redis.UniversalClient
	client                   *tunnel.Client
	method                   *tunnel.MethodDesc
	req                      *wrapperspb.BytesValue
	stopServing              context.CancelFunc
	served                   chan struct{} // closed once Serve has returned
	serveErr                 error         // what Serve returned, once served is closed
}

// rprJobsDesc describes the service to rpr by hand (what generated code
// would): one async method whose handler decodes the request and counts.
func rprJobsDesc(counted *counter) *tunnel.ServiceDesc {
	info := &tunnel.ServiceInfo{Name: jobsService}
	return &tunnel.ServiceDesc{Service: info, Methods: []tunnel.MethodDesc{{
		Service: info, Name: jobsMethod, Async: true,
		Handler: func(_ any, _ context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
			if err := decode(new(wrapperspb.BytesValue)); err != nil {
				return nil, err
			}
			counted.hit()
			return nil, nil
		},
	}}}
}

func startRPRAsync(ctx context.Context, redisURL string, counted *counter, payload []byte, opts AsyncOptions) (asyncSystem, error) {
	req := new(wrapperspb.BytesValue)
	if err := proto.Unmarshal(payload, req); err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	desc := rprJobsDesc(counted)
	s := &rprAsync{method: &desc.Methods[0], req: req, served: make(chan struct{})}
	quiet := slog.New(slog.DiscardHandler)
	var err error
	for _, rdb := range []*redis.UniversalClient{&s.serverRedis, &s.clientRedis} {
		if *rdb, err = tunnel.Open(ctx, redisURL); err != nil {
			s.Close()
			return nil, err
		}
	}
	srv, err := tunnel.NewServer(s.serverRedis, tunnel.ServerOptions{Concurrency: opts.Concurrency, Logger: quiet})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("new server: %w", err)
	}
	srv.RegisterService(desc, struct{}{})
	serveCtx, stop := context.WithCancel(context.Background())
	s.stopServing = stop
	go func() {
		s.serveErr = srv.Serve(serveCtx)
		close(s.served)
	}()
	// Room for every task of the run at once: the producers outrun the
	// server, and a refused enqueue would end the run.
	backlog := int64(opts.Tasks + opts.Warmup + 1000)
	if s.client, err = tunnel.NewClient(s.clientRedis, tunnel.ClientOptions{Logger: quiet, MaxBacklog: backlog}); err != nil {
		s.Close()
		return nil, fmt.Errorf("new client: %w", err)
	}
	return s, nil
}

func (s *rprAsync) Enqueue(ctx context.Context) error {
	_, err := s.client.Enqueue(ctx, s.method, s.req)
	return err
}

// Stopped is closed if the server stops before Close, having failed.
func (s *rprAsync) Stopped() <-chan struct{} { return s.served }

func (s *rprAsync) Close() error {
	var errs []error
	if s.client != nil {
		if err := s.client.Close(); err != nil {
			errs = append(errs, fmt.Errorf("rpr client: %w", err))
		}
	}
	if s.stopServing != nil {
		s.stopServing()
		select {
		case <-s.served: // nil once stopped; an error if it never started
			if s.serveErr != nil {
				errs = append(errs, fmt.Errorf("rpr server: %w", s.serveErr))
			}
		case <-time.After(stopBound):
			errs = append(errs, fmt.Errorf("rpr server did not stop within %v", stopBound))
		}
	}
	for _, rdb := range []redis.UniversalClient{s.clientRedis, s.serverRedis} {
		if rdb != nil {
			_ = rdb.Close()
		}
	}
	return errors.Join(errs...)
}

// ---- asynq ----

// asynqSystem is an asynq server with a mux handling one task type and an
// asynq client enqueueing it, each with its own connection pool (asynq
// makes one per RedisConnOpt).
type asynqSystem struct {
	client *asynq.Client
	server *asynq.Server
	req    *wrapperspb.BytesValue
}

// AsynqSettings states how the comparison configures asynq, for the
// report: everything else is asynq's default.
func AsynqSettings(opts AsyncOptions) string {
	check := "its default 1s"
	if opts.AsynqTaskCheckInterval > 0 {
		check = opts.AsynqTaskCheckInterval.String()
	}
	return fmt.Sprintf("Config{Concurrency: %d, Queues: {default: 1}, TaskCheckInterval: %s, LogLevel: warn}; "+
		"tasks enqueued with no options: queue \"default\", MaxRetry 25, Timeout 30m, Retention 0 (deleted once done), no Unique, no TaskID, no group",
		opts.Concurrency, check)
}

func startAsynq(_ context.Context, redisURL string, counted *counter, payload []byte, opts AsyncOptions) (asyncSystem, error) {
	req := new(wrapperspb.BytesValue)
	if err := proto.Unmarshal(payload, req); err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	conn, err := asynq.ParseRedisURI(redisURL)
	if err != nil {
		return nil, fmt.Errorf("redis URL %s: %w", redisURL, err)
	}
	mux := asynq.NewServeMux()
	mux.HandleFunc(asynqTaskType, func(_ context.Context, t *asynq.Task) error {
		if err := decodeTask(t.Payload()); err != nil {
			return err
		}
		counted.hit()
		return nil
	})
	server := asynq.NewServer(conn, asynq.Config{
		Concurrency:       opts.Concurrency,
		Queues:            map[string]int{"default": 1},
		TaskCheckInterval: opts.AsynqTaskCheckInterval, // zero: asynq's default
		Logger:            asynqLogger{opts.Log},
		LogLevel:          asynq.WarnLevel,
	})
	if err := server.Start(mux); err != nil {
		return nil, fmt.Errorf("asynq server: %w", err)
	}
	return &asynqSystem{client: asynq.NewClient(conn), server: server, req: req}, nil
}

// Enqueue marshals the request, as a typed client would, and enqueues it.
func (s *asynqSystem) Enqueue(ctx context.Context) error {
	b, err := proto.Marshal(s.req)
	if err != nil {
		return err
	}
	_, err = s.client.EnqueueContext(ctx, asynq.NewTask(asynqTaskType, b))
	return err
}

// Stopped never fires: an asynq server that cannot reach Redis keeps
// trying (and logs it) rather than stop.
func (s *asynqSystem) Stopped() <-chan struct{} { return nil }

// Close shuts the server down (Shutdown returns once its processor,
// heartbeater, forwarder, recoverer, janitor, syncer, subscriber,
// healthchecker and aggregator have stopped) and closes the client.
func (s *asynqSystem) Close() error {
	stopped := make(chan struct{})
	go func() {
		s.server.Shutdown()
		close(stopped)
	}()
	var err error
	select {
	case <-stopped:
	case <-time.After(stopBound):
		err = fmt.Errorf("asynq server did not shut down within %v", stopBound)
	}
	if cerr := s.client.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("asynq client: %w", cerr)
	}
	return err
}

// asynqLogger passes asynq's warnings and errors on to w and drops the
// rest (the server is also set to LogLevel warn).
type asynqLogger struct{ w io.Writer }

func (asynqLogger) Debug(...any)       {}
func (asynqLogger) Info(...any)        {}
func (l asynqLogger) Warn(args ...any) { l.print("warning", args) }
func (l asynqLogger) Error(args ...any) {
	l.print("error", args)
}

// Fatal logs like Error: asynq calls it only from Server.Run, which the
// comparison does not use, and the comparison never exits from a library
// callback.
func (l asynqLogger) Fatal(args ...any) { l.print("fatal", args) }

func (l asynqLogger) print(level string, args []any) {
	fmt.Fprintf(l.w, "asynq %s: %s\n", level, fmt.Sprint(args...))
}
