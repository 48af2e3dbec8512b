package compare

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/tunnel"
)

// Both systems serve the same method: Echo(BytesValue) returns BytesValue,
// the request unchanged, so a call carries the payload both ways.
const (
	echoService = "rprbench.Echo"
	echoMethod  = "Echo"
)

// Echoer is one side of the comparison, client and server in this process.
type Echoer interface {
	// Call makes one echo call with in, a payload of the run's size.
	Call(ctx context.Context, in *wrapperspb.BytesValue) error
	// RedisFigures samples the Redis behind the system; ok is false for
	// a system that uses none.
	RedisFigures(ctx context.Context) (f redisinfo.Sample, ok bool, err error)
	// Close stops the server and the client.
	Close()
}

// ---- rpr ----

// rprEchoDesc describes the echo service to rpr by hand (what generated
// code would), so no code generation is needed.
var rprEchoInfo = tunnel.ServiceInfo{Name: echoService}

var rprEchoDesc = tunnel.ServiceDesc{
	Service: &rprEchoInfo,
	Methods: []tunnel.MethodDesc{{
		Service: &rprEchoInfo,
		Name:    echoMethod,
		Handler: func(_ any, ctx context.Context, decode func(proto.Message) error, interceptor tunnel.UnaryServerInterceptor) (proto.Message, error) {
			in := new(wrapperspb.BytesValue)
			if err := decode(in); err != nil {
				return nil, err
			}
			if interceptor == nil {
				return in, nil
			}
			info := &tunnel.UnaryServerInfo{FullMethod: echoService + "/" + echoMethod}
			return interceptor(ctx, in, info, func(_ context.Context, req proto.Message) (proto.Message, error) { return req, nil })
		},
	}},
}

// rprEcho is an rpr server and client of the echo service, each with its
// own connection pool to one redis-server, as two deployments would be.
type rprEcho struct {
	admin, serverRedis, clientRedis redis.UniversalClient
	client                          *tunnel.Client
	stopServing                     context.CancelFunc
	served                          chan error
}

func StartRPR(ctx context.Context, redisURL string) (Echoer, error) {
	e := &rprEcho{served: make(chan error, 1)}
	quiet := slog.New(slog.DiscardHandler)
	var err error
	for _, rdb := range []*redis.UniversalClient{&e.admin, &e.serverRedis, &e.clientRedis} {
		if *rdb, err = tunnel.Open(ctx, redisURL); err != nil {
			e.Close()
			return nil, err
		}
	}
	srv, err := tunnel.NewServer(e.serverRedis, tunnel.ServerOptions{Concurrency: 256, Logger: quiet})
	if err != nil {
		e.Close()
		return nil, err
	}
	srv.RegisterService(&rprEchoDesc, struct{}{})
	serveCtx, stop := context.WithCancel(context.Background())
	e.stopServing = stop
	go func() { e.served <- srv.Serve(serveCtx) }()
	if e.client, err = tunnel.NewClient(e.clientRedis, tunnel.ClientOptions{Logger: quiet}); err != nil {
		e.Close()
		return nil, err
	}
	// Calls until one goes through: the server is up and the client knows.
	probe := wrapperspb.Bytes([]byte("ready?"))
	for deadline := time.Now().Add(15 * time.Second); ; {
		err := e.Call(ctx, probe)
		if err == nil {
			return e, nil
		}
		if tunnel.CodeOf(err) != tunnel.Unavailable || time.Now().After(deadline) {
			e.Close()
			return nil, fmt.Errorf("rpr echo server does not answer: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *rprEcho) Call(ctx context.Context, in *wrapperspb.BytesValue) error {
	return e.client.Invoke(ctx, &rprEchoDesc.Methods[0], in, new(wrapperspb.BytesValue))
}

func (e *rprEcho) RedisFigures(ctx context.Context) (redisinfo.Sample, bool, error) {
	f, err := redisinfo.Read(ctx, e.admin)
	return f, true, err
}

func (e *rprEcho) Close() {
	if e.client != nil {
		e.client.Close()
	}
	if e.stopServing != nil {
		e.stopServing()
		<-e.served
	}
	for _, rdb := range []redis.UniversalClient{e.clientRedis, e.serverRedis, e.admin} {
		if rdb != nil {
			rdb.Close()
		}
	}
}

// ---- gRPC ----

// grpcEchoDesc is the echo service for gRPC-go, written by hand (what
// protoc-gen-go-grpc would generate), with the stock protobuf codec.
var grpcEchoDesc = grpc.ServiceDesc{
	ServiceName: echoService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: echoMethod,
		Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			if interceptor == nil {
				return in, nil
			}
			info := &grpc.UnaryServerInfo{FullMethod: "/" + echoService + "/" + echoMethod}
			return interceptor(ctx, in, info, func(_ context.Context, req any) (any, error) { return req, nil })
		},
	}},
	Metadata: "grpccompare",
}

// GRPCEchoMethod is the echo method's full gRPC name, for
// grpc.ClientConn.Invoke: it takes a BytesValue and returns it.
const GRPCEchoMethod = "/" + echoService + "/" + echoMethod

// NewGRPCEchoServer returns a gRPC-go server of the echo service, for the
// caller to serve on a listener of its own (an upstream behind a proxy).
func NewGRPCEchoServer() *grpc.Server {
	s := grpc.NewServer()
	s.RegisterService(&grpcEchoDesc, struct{}{})
	return s
}

// grpcEcho is a gRPC-go server on a loopback TCP port and a client of it.
type grpcEcho struct{ *grpcLoopback }

func StartGRPC(ctx context.Context) (Echoer, error) {
	g, err := startGRPCLoopback(&grpcEchoDesc)
	if err != nil {
		return nil, err
	}
	e := &grpcEcho{g}
	if err := e.Call(ctx, wrapperspb.Bytes([]byte("ready?"))); err != nil {
		e.Close()
		return nil, fmt.Errorf("gRPC echo server does not answer: %w", err)
	}
	return e, nil
}

func (e *grpcEcho) Call(ctx context.Context, in *wrapperspb.BytesValue) error {
	return e.conn.Invoke(ctx, "/"+echoService+"/"+echoMethod, in, new(wrapperspb.BytesValue))
}

func (e *grpcEcho) RedisFigures(context.Context) (redisinfo.Sample, bool, error) {
	return redisinfo.Sample{}, false, nil
}

// ---- the load ----

// Result is one measured run of one system at one concurrency.
type Result struct {
	Calls, Errors int
	FirstErr      error // the first failed call's error
	Elapsed       time.Duration
	P50, P99      time.Duration
	ProcessCPU    time.Duration // this process's user+system CPU; -1: not measured
	RedisCPU      time.Duration // redis-server's (INFO cpu); -1: no Redis
	RedisCommands int64         // commands Redis executed (INFO commandstats); -1: no Redis
	// OtherCPU is the user+system CPU of each of the system's other
	// processes (OtherProcesses), in their order; nil: none.
	OtherCPU []time.Duration
}

// OtherProcesses is an Echoer whose system runs partly in processes of its
// own besides redis-server (rpr ingress and egress, say): Measure reads
// their CPU before and after the measured calls.
type OtherProcesses interface {
	// OtherCPU returns the user+system CPU each process has used so far,
	// always in the same order.
	OtherCPU() ([]time.Duration, error)
}

// CallsPerSecond is the throughput of the run.
func (r Result) CallsPerSecond() float64 { return float64(r.Calls) / r.Elapsed.Seconds() }

// PerCall returns d per call in microseconds, or -1 when d is -1.
func (r Result) PerCall(d time.Duration) float64 {
	if d < 0 {
		return -1
	}
	return float64(d.Nanoseconds()) / 1e3 / float64(r.Calls)
}

// Measure makes warmup calls, then calls calls, with concurrency callers
// each making one call after the other (a closed loop), and reports
// throughput, exact latency quantiles and CPU per call: this process's
// (client and server) and, for rpr, Redis's.
func Measure(ctx context.Context, sys Echoer, payload []byte, concurrency, calls, warmup int) (Result, error) {
	in := wrapperspb.Bytes(payload)
	call := func(ctx context.Context, _ int) error { return sys.Call(ctx, in) }
	loop := func(n int, latencies []time.Duration) (errs int, firstErr error) {
		return ClosedLoop(ctx, concurrency, n, latencies, call)
	}

	loop(warmup, nil)
	runtime.GC()
	latencies := make([]time.Duration, calls)
	before, hasRedis, err := sys.RedisFigures(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("INFO: %w", err)
	}
	others, hasOthers := sys.(OtherProcesses)
	var othersBefore []time.Duration
	if hasOthers {
		if othersBefore, err = others.OtherCPU(); err != nil {
			return Result{}, err
		}
	}
	cpuBefore := ProcessCPU()
	start := time.Now()
	errs, firstErr := loop(calls, latencies)
	elapsed := time.Since(start)
	cpuAfter := ProcessCPU()
	var othersAfter []time.Duration
	if hasOthers {
		if othersAfter, err = others.OtherCPU(); err != nil {
			return Result{}, err
		}
	}
	after, _, err := sys.RedisFigures(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("INFO: %w", err)
	}

	slices.Sort(latencies)
	r := Result{
		Calls: calls, Errors: errs, FirstErr: firstErr, Elapsed: elapsed,
		P50: latencies[calls/2], P99: latencies[min(calls*99/100, calls-1)],
		ProcessCPU: -1, RedisCPU: -1, RedisCommands: -1,
	}
	if cpuBefore >= 0 && cpuAfter >= 0 {
		r.ProcessCPU = cpuAfter - cpuBefore
	}
	if hasRedis {
		d := after.Sub(before)
		r.RedisCPU, r.RedisCommands = d.CPU, d.Commands
	}
	for i := range min(len(othersBefore), len(othersAfter)) {
		r.OtherCPU = append(r.OtherCPU, othersAfter[i]-othersBefore[i])
	}
	return r, nil
}
