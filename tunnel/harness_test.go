package tunnel_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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
// code, so the runtime's tests do not depend on gen/.
const echoService = "test.v1.Echo"

var echoInfo = tunnel.ServiceInfo{Name: echoService}

type echoHandler func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)

func echoMethod(name string, timeout time.Duration) tunnel.MethodDesc {
	return tunnel.MethodDesc{
		Service: &echoInfo,
		Name:    name,
		Timeout: timeout,
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
		echoMethod("Echo", 0),
		echoMethod("Fail", 0),
		echoMethod("Panic", 0),
		echoMethod("Slow", 0),
		echoMethod("Meta", 0),
		echoMethod("Big", 0),
		idempotent(echoMethod("Idem", 0)),
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
	m := echoMethod(name, 0)
	return &m
}

// env is one test's world: a real redis-server, a running Server and a
// Client.
type env struct {
	t      *testing.T
	redis  *redistest.Server
	rdb    redis.UniversalClient
	client *tunnel.Client
	server *tunnel.Server
	stop   context.CancelFunc
	served chan error

	mu       sync.Mutex
	calls    map[string]int   // executions per method, and per "method(value)"
	attempts map[string][]int // the attempt numbers each request id ran with
	results  map[string]error // how each method's last execution ended (nil: not yet)
	logs     *logBuffer
}

type envConfig struct {
	server  tunnel.ServerOptions
	client  tunnel.ClientOptions
	noServe bool
}

func newEnv(t *testing.T, cfg envConfig) *env {
	t.Helper()
	rs := redistest.Start(t)
	e := &env{t: t, redis: rs, rdb: rs.Client(t), calls: map[string]int{}, attempts: map[string][]int{}, results: map[string]error{}, logs: &logBuffer{}}
	logger := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.server.Logger == nil {
		cfg.server.Logger = logger
	}
	if cfg.client.Logger == nil {
		cfg.client.Logger = logger
	}
	var err error
	e.server, err = tunnel.NewServer(e.rdb, withTestLease(cfg.server))
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
	if !cfg.noServe {
		e.serve()
	}
	return e
}

// testLease is the lease of every test's server that sets none (see
// withTestLease, which each of the helpers that make servers applies). A
// server's blocking reads last min(Lease/4, 1s), and Serve returns only
// once they have (entries Redis hands out must be handled), so with the
// default 5s lease every test waited up to a second for each server it
// stopped; 2s halves that. Leases of live workers are renewed every
// Lease/3, so no handler is taken over for running long.
const testLease = 2 * time.Second

// withTestLease returns opts with testLease when opts has no lease.
func withTestLease(opts tunnel.ServerOptions) tunnel.ServerOptions {
	if opts.Lease == 0 {
		opts.Lease = testLease
	}
	return opts
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

// server2Logger is the logger for an extra server in the same test.
func (e *env) server2Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("server", 2)
}

// attemptsRun returns the attempt numbers request id rid ran with, one per
// execution.
func (e *env) attemptsRun(rid string) []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.attempts[rid])
}

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
			rid := tunnel.RequestIDFromContext(ctx)
			e.attempts[rid] = append(e.attempts[rid], tunnel.AttemptFromContext(ctx))
			e.mu.Unlock()
			out, err := h(ctx, in)
			e.mu.Lock()
			e.results[name] = cmp.Or(err, errHandlerOK)
			e.mu.Unlock()
			return out, err
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
		"Meta": record("Meta", func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			md := tunnel.HeaderFromContext(ctx)
			_ = tunnel.SetHeader(ctx, tunnel.Metadata{"x-served-by": {"test"}})
			_ = tunnel.SetTrailer(ctx, tunnel.Metadata{"x-request-id": {tunnel.RequestIDFromContext(ctx)}})
			return wrapperspb.String(strings.Join(md.Values("tenant"), ",")), nil
		}),
		"Idem": record("Idem", func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return wrapperspb.String("idem: " + in.GetValue()), nil
		}),
		"Big": record("Big", func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			var n int
			_, _ = fmt.Sscan(in.GetValue(), &n)
			return wrapperspb.String(strings.Repeat("x", n)), nil
		}),
	}
}

// errHandlerOK is what result reports for an execution that succeeded.
var errHandlerOK = errors.New("handler returned a reply")

// result returns how the last execution of method ended: its error,
// errHandlerOK, or nil while none has ended.
func (e *env) result(method string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.results[method]
}

func (e *env) call(ctx context.Context, name, in string, opts ...tunnel.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	err := e.client.Invoke(ctx, method(name), wrapperspb.String(in), out, opts...)
	return out.GetValue(), err
}

// logBuffer collects log output for assertions.
type logBuffer = logcapture.Buffer

// waitFor polls cond (a test condition, not the code under test) every
// 20ms until it holds, failing tb after 10 s.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	poll(tb, 10*time.Second, 20*time.Millisecond, what, cond, nil)
}

// waitLong polls cond (a condition on the test's world) every 50ms until
// it holds, failing tb after timeout; progress, when set, describes how
// far things got.
func waitLong(tb testing.TB, timeout time.Duration, what string, cond func() bool, progress func() string) {
	tb.Helper()
	poll(tb, timeout, 50*time.Millisecond, what, cond, progress)
}

func poll(tb testing.TB, timeout, every time.Duration, what string, cond func() bool, progress func() string) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			msg := ""
			if progress != nil {
				msg = ": " + progress()
			}
			tb.Fatalf("timed out after %v waiting for %s%s", timeout, what, msg)
		}
		time.Sleep(every)
	}
}

// startServer creates a Server on rdb with opts, lets register add its
// services, and runs it until tb ends or stop is called. stop (idempotent)
// ends Serve's context and waits for Serve to return, reporting an error
// it returns.
func startServer(tb testing.TB, rdb redis.UniversalClient, opts tunnel.ServerOptions, register func(*tunnel.Server)) (srv *tunnel.Server, stop func()) {
	tb.Helper()
	srv, err := tunnel.NewServer(rdb, withTestLease(opts))
	if err != nil {
		tb.Fatal(err)
	}
	register(srv)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-served:
				if err != nil {
					tb.Errorf("Serve (lane %q): %v", opts.Lane, err)
				}
			case <-time.After(60 * time.Second):
				tb.Errorf("Serve (lane %q) did not return 60s after its context ended", opts.Lane)
			}
		})
	}
	tb.Cleanup(stop)
	return srv, stop
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}
