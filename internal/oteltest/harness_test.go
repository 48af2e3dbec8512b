package oteltest_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/logcapture"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// echoService is a hand-written service descriptor, shaped like generated
// code, so these tests depend neither on gen/ nor on tunnel's own tests.
const echoService = "test.v1.Echo"

var echoInfo = tunnel.ServiceInfo{Name: echoService}

type echoHandler func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)

func echoMethod(name string) tunnel.MethodDesc {
	return tunnel.MethodDesc{
		Service: &echoInfo,
		Name:    name,
		Handler: func(impl any, ctx context.Context, decode func(proto.Message) error, interceptor tunnel.UnaryServerInterceptor) (proto.Message, error) {
			in := new(wrapperspb.StringValue)
			if err := decode(in); err != nil {
				return nil, err
			}
			h := impl.(map[string]echoHandler)[name]
			if interceptor == nil {
				return h(ctx, in)
			}
			info := &tunnel.UnaryServerInfo{Server: impl, FullMethod: echoService + "/" + name}
			return interceptor(ctx, in, info, func(ctx context.Context, req proto.Message) (proto.Message, error) {
				return h(ctx, req.(*wrapperspb.StringValue))
			})
		},
	}
}

func idempotent(m tunnel.MethodDesc) tunnel.MethodDesc {
	m.Idempotent = true
	return m
}

var echoDesc = tunnel.ServiceDesc{
	Service: &echoInfo,
	Methods: []tunnel.MethodDesc{
		echoMethod("Echo"),
		echoMethod("Fail"),
		echoMethod("Panic"),
		echoMethod("Slow"),
		idempotent(echoMethod("Idem")),
	},
}

// method returns the descriptor of a method by name (also ones the server
// does not have, to test UNIMPLEMENTED).
func method(name string) *tunnel.MethodDesc {
	for i := range echoDesc.Methods {
		if echoDesc.Methods[i].Name == name {
			return &echoDesc.Methods[i]
		}
	}
	m := echoMethod(name)
	return &m
}

// jobsService is a hand-written service with one async method. No server
// serves it here: the tests only enqueue to it.
const jobsService = "test.v1.Jobs"

var jobsInfo = tunnel.ServiceInfo{Name: jobsService}

var jobsDo = tunnel.MethodDesc{
	Service: &jobsInfo,
	Name:    "Do",
	Async:   true,
	Retry:   &tunnel.RetryPolicy{MaxAttempts: 3, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond},
	Handler: func(any, context.Context, func(proto.Message) error, tunnel.UnaryServerInterceptor) (proto.Message, error) {
		return nil, tunnel.Errorf(tunnel.Unimplemented, "no Jobs server in these tests")
	},
}

// env is one test's world: a real redis-server, a running Server and a
// Client, each with a Redis connection of its own.
type env struct {
	t      *testing.T
	redis  *redistest.Server
	rdb    redis.UniversalClient
	client *tunnel.Client
	server *tunnel.Server
	stop   context.CancelFunc
	served chan error

	mu    sync.Mutex
	calls map[string]int // executions per method, and per "method(value)"
	logs  *logcapture.Buffer
}

type envConfig struct {
	server tunnel.ServerOptions
	client tunnel.ClientOptions
}

func newEnv(t *testing.T, cfg envConfig) *env {
	t.Helper()
	rs := redistest.Start(t)
	e := &env{t: t, redis: rs, rdb: rs.Client(t), calls: map[string]int{}, logs: &logcapture.Buffer{}}
	if cfg.server.Logger == nil {
		cfg.server.Logger = e.logger()
	}
	if cfg.client.Logger == nil {
		cfg.client.Logger = e.logger()
	}
	var err error
	e.server, err = tunnel.NewServer(e.rdb, cfg.server)
	if err != nil {
		t.Fatal(err)
	}
	e.server.RegisterService(&echoDesc, e.handlers())
	// The client has a Redis connection of its own, as it would in another
	// process on another network.
	e.client, err = tunnel.NewClient(rs.Client(t), cfg.client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.client.Close() })
	e.serve()
	return e
}

// logger writes to the env's log buffer, for assertions on log lines.
func (e *env) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// serve starts the server; Cleanup stops it and checks it returned nil.
func (e *env) serve() {
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	e.served = make(chan error, 1)
	go func() { e.served <- e.server.Serve(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case err := <-e.served:
			if err != nil {
				e.t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			e.t.Error("Serve did not return 30s after its context ended")
		}
	})
	e.waitLive()
}

// waitLive waits until the client can see the server's heartbeat.
func (e *env) waitLive() {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := e.client.Invoke(context.Background(), method("Echo"), wrapperspb.String("ping"), new(wrapperspb.StringValue))
		if tunnel.CodeOf(err) != tunnel.Unavailable {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("server never became live: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// count returns how often the handler of name ran.
func (e *env) count(name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[name]
}

func (e *env) handlers() map[string]echoHandler {
	record := func(name string, h echoHandler) echoHandler {
		return func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			e.mu.Lock()
			e.calls[name]++
			e.calls[name+"("+in.GetValue()+")"]++
			e.mu.Unlock()
			return h(ctx, in)
		}
	}
	return map[string]echoHandler{
		"Echo": record("Echo", func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return wrapperspb.String("echo: " + in.GetValue()), nil
		}),
		"Fail": record("Fail", func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			e, err := tunnel.Errorf(tunnel.NotFound, "order %q not found", in.GetValue()).WithDetails(wrapperspb.String("detail:" + in.GetValue()))
			if err != nil {
				return nil, err
			}
			return nil, e
		}),
		"Panic": record("Panic", func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			panic("boom: " + in.GetValue())
		}),
		"Slow": record("Slow", func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			d, err := time.ParseDuration(in.GetValue())
			if err != nil {
				return nil, tunnel.Errorf(tunnel.InvalidArgument, "bad duration: %v", err)
			}
			select {
			case <-time.After(d):
				return wrapperspb.String("slept " + in.GetValue()), nil
			case <-ctx.Done():
				return nil, tunnel.NewError(tunnel.DeadlineExceeded, ctx.Err())
			}
		}),
		"Idem": record("Idem", func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return wrapperspb.String("idem: " + in.GetValue()), nil
		}),
	}
}

func (e *env) call(ctx context.Context, name, in string, opts ...tunnel.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	err := e.client.Invoke(ctx, method(name), wrapperspb.String(in), out, opts...)
	return out.GetValue(), err
}

// stopServerAndWait stops the env's server and waits until Serve has
// returned (it removes its heartbeat on the way out).
func (e *env) stopServerAndWait() {
	e.t.Helper()
	e.stop()
	select {
	case err := <-e.served:
		e.served <- err // for the cleanup check
	case <-time.After(10 * time.Second):
		e.t.Fatal("Serve did not return after its context ended")
	}
}

// waitFor polls cond (a test condition, not the code under test) every
// 20ms until it holds, failing tb after 10 s.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after 10s waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startServer creates a Server on rdb with opts, lets register add its
// services, and runs it until tb ends; Cleanup ends Serve's context and
// waits for Serve to return, reporting an error it returns.
func startServer(tb testing.TB, rdb redis.UniversalClient, opts tunnel.ServerOptions, register func(*tunnel.Server)) {
	tb.Helper()
	srv, err := tunnel.NewServer(rdb, opts)
	if err != nil {
		tb.Fatal(err)
	}
	register(srv)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				tb.Errorf("Serve: %v", err)
			}
		case <-time.After(60 * time.Second):
			tb.Error("Serve did not return 60s after its context ended")
		}
	})
}
