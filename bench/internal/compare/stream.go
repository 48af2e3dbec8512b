package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/tunnel"
)

// The streaming comparison: the same two streaming methods on rpr and on
// gRPC-go, client and server in this process.
//
//	Feed (StringValue "count/size") returns (stream BytesValue)
//	     count replies of size bytes, the same message each time
//	Ping (stream BytesValue) returns (stream BytesValue)
//	     each message echoed back, a ping-pong
const (
	streamService = "rprbench.Stream"
	feedMethod    = "Feed"
	pingMethod    = "Ping"
)

// Streamer is one side of the streaming comparison.
type Streamer interface {
	// Feed opens a server stream of count messages of size bytes and
	// receives them all; it returns how many arrived.
	Feed(ctx context.Context, count, size int) (int, error)
	// PingPong sends rounds messages of size bytes on one bidirectional
	// stream, each after the echo of the previous one, and stores each
	// round trip in rtts (when not nil).
	PingPong(ctx context.Context, rounds, size int, rtts []time.Duration) error
	// RedisFigures samples the Redis behind the system; ok is false for
	// a system that uses none.
	RedisFigures(ctx context.Context) (f redisinfo.Sample, ok bool, err error)
	// Close stops the server and the client.
	Close()
}

// feedRequest parses "count/size".
func feedRequest(s string) (count, size int, err error) {
	c, z, _ := strings.Cut(s, "/")
	if count, err = strconv.Atoi(c); err == nil {
		size, err = strconv.Atoi(z)
	}
	if err != nil || count < 0 || size < 0 {
		return 0, 0, fmt.Errorf("feed request %q is not count/size", s)
	}
	return count, size, nil
}

func feedLine(count, size int) *wrapperspb.StringValue {
	return wrapperspb.String(strconv.Itoa(count) + "/" + strconv.Itoa(size))
}

// ---- rpr ----

var rprStreamInfo = tunnel.ServiceInfo{Name: streamService}

var rprStreamDesc = tunnel.ServiceDesc{
	Service: &rprStreamInfo,
	Methods: []tunnel.MethodDesc{
		{Service: &rprStreamInfo, Name: feedMethod, ServerStreams: true, StreamHandler: func(_ any, s tunnel.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := s.RecvMsg(in); err != nil {
				return err
			}
			count, size, err := feedRequest(in.GetValue())
			if err != nil {
				return tunnel.Errorf(tunnel.InvalidArgument, "%v", err)
			}
			msg := wrapperspb.Bytes(make([]byte, size))
			for range count {
				if err := s.SendMsg(msg); err != nil {
					return err
				}
			}
			return nil
		}},
		{Service: &rprStreamInfo, Name: pingMethod, ClientStreams: true, ServerStreams: true, StreamHandler: func(_ any, s tunnel.ServerStream) error {
			for {
				in := new(wrapperspb.BytesValue)
				if err := s.RecvMsg(in); errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return err
				}
				if err := s.SendMsg(in); err != nil {
					return err
				}
			}
		}},
	},
}

// rprStream is an rpr server and client of the stream service, each with
// its own connection pool to one redis-server.
type rprStream struct {
	admin, serverRedis, clientRedis redis.UniversalClient
	client                          *tunnel.Client
	stopServing                     context.CancelFunc
	served                          chan error
}

// StartRPRStream starts an rpr server and client of the stream service on
// the Redis at redisURL.
func StartRPRStream(ctx context.Context, redisURL string) (Streamer, error) {
	e := &rprStream{served: make(chan error, 1)}
	quiet := slog.New(slog.DiscardHandler)
	var err error
	for _, rdb := range []*redis.UniversalClient{&e.admin, &e.serverRedis, &e.clientRedis} {
		if *rdb, err = tunnel.Open(ctx, redisURL); err != nil {
			e.Close()
			return nil, err
		}
	}
	srv, err := tunnel.NewServer(e.serverRedis, tunnel.ServerOptions{Logger: quiet})
	if err != nil {
		e.Close()
		return nil, err
	}
	srv.RegisterService(&rprStreamDesc, struct{}{})
	serveCtx, stop := context.WithCancel(context.Background())
	e.stopServing = stop
	go func() { e.served <- srv.Serve(serveCtx) }()
	if e.client, err = tunnel.NewClient(e.clientRedis, tunnel.ClientOptions{Logger: quiet}); err != nil {
		e.Close()
		return nil, err
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		_, err := e.Feed(ctx, 1, 1)
		if err == nil {
			return e, nil
		}
		if tunnel.CodeOf(err) != tunnel.Unavailable || time.Now().After(deadline) {
			e.Close()
			return nil, fmt.Errorf("rpr stream server does not answer: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *rprStream) Feed(ctx context.Context, count, size int) (int, error) {
	s, err := e.client.NewStream(ctx, &rprStreamDesc.Methods[0])
	if err != nil {
		return 0, err
	}
	if err := s.SendMsg(feedLine(count, size)); err != nil {
		return 0, err
	}
	if err := s.CloseSend(); err != nil {
		return 0, err
	}
	return drain(func(m *wrapperspb.BytesValue) error { return s.RecvMsg(m) })
}

func (e *rprStream) PingPong(ctx context.Context, rounds, size int, rtts []time.Duration) error {
	s, err := e.client.NewStream(ctx, &rprStreamDesc.Methods[1])
	if err != nil {
		return err
	}
	return pingPong(rounds, size, rtts, s.SendMsg, s.RecvMsg, s.CloseSend)
}

func (e *rprStream) RedisFigures(ctx context.Context) (redisinfo.Sample, bool, error) {
	f, err := redisinfo.Read(ctx, e.admin)
	return f, true, err
}

func (e *rprStream) Close() {
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

// drain receives until the end of a stream and counts the messages.
func drain(recv func(*wrapperspb.BytesValue) error) (int, error) {
	n := 0
	m := new(wrapperspb.BytesValue)
	for {
		err := recv(m)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// pingPong is PingPong over either system's stream.
func pingPong[S, R any](rounds, size int, rtts []time.Duration, send func(S) error, recv func(R) error, closeSend func() error) error {
	ping := wrapperspb.Bytes(make([]byte, size))
	pong := new(wrapperspb.BytesValue)
	for i := range rounds {
		t0 := time.Now()
		if err := send(any(ping).(S)); err != nil {
			return fmt.Errorf("ping %d: %w", i, err)
		}
		if err := recv(any(pong).(R)); err != nil {
			return fmt.Errorf("pong %d: %w", i, err)
		}
		if rtts != nil {
			rtts[i] = time.Since(t0)
		}
		if len(pong.GetValue()) != size {
			return fmt.Errorf("pong %d: %d bytes, want %d", i, len(pong.GetValue()), size)
		}
	}
	if err := closeSend(); err != nil {
		return err
	}
	if err := recv(any(pong).(R)); !errors.Is(err, io.EOF) {
		return fmt.Errorf("after the last pong: %v, want the end of the stream", err)
	}
	return nil
}

// ---- gRPC ----

var grpcStreamDesc = grpc.ServiceDesc{
	ServiceName: streamService,
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{
		{StreamName: feedMethod, ServerStreams: true, Handler: func(_ any, s grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := s.RecvMsg(in); err != nil {
				return err
			}
			count, size, err := feedRequest(in.GetValue())
			if err != nil {
				return err
			}
			msg := wrapperspb.Bytes(make([]byte, size))
			for range count {
				if err := s.SendMsg(msg); err != nil {
					return err
				}
			}
			return nil
		}},
		{StreamName: pingMethod, ServerStreams: true, ClientStreams: true, Handler: func(_ any, s grpc.ServerStream) error {
			for {
				in := new(wrapperspb.BytesValue)
				if err := s.RecvMsg(in); errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return err
				}
				if err := s.SendMsg(in); err != nil {
					return err
				}
			}
		}},
	},
	Metadata: "streamcompare",
}

// grpcStream is a gRPC-go server of the stream service on a loopback TCP
// port and a client of it.
type grpcStream struct{ *grpcLoopback }

// StartGRPCStream starts a gRPC-go server and client of the stream service.
func StartGRPCStream(ctx context.Context) (Streamer, error) {
	g, err := startGRPCLoopback(&grpcStreamDesc)
	if err != nil {
		return nil, err
	}
	e := &grpcStream{g}
	if _, err := e.Feed(ctx, 1, 1); err != nil {
		e.Close()
		return nil, fmt.Errorf("gRPC stream server does not answer: %w", err)
	}
	return e, nil
}

func (e *grpcStream) Feed(ctx context.Context, count, size int) (int, error) {
	s, err := e.conn.NewStream(ctx, &grpcStreamDesc.Streams[0], "/"+streamService+"/"+feedMethod)
	if err != nil {
		return 0, err
	}
	if err := s.SendMsg(feedLine(count, size)); err != nil {
		return 0, err
	}
	if err := s.CloseSend(); err != nil {
		return 0, err
	}
	return drain(func(m *wrapperspb.BytesValue) error { return s.RecvMsg(m) })
}

func (e *grpcStream) PingPong(ctx context.Context, rounds, size int, rtts []time.Duration) error {
	s, err := e.conn.NewStream(ctx, &grpcStreamDesc.Streams[1], "/"+streamService+"/"+pingMethod)
	if err != nil {
		return err
	}
	return pingPong(rounds, size, rtts, s.SendMsg, s.RecvMsg, s.CloseSend)
}

func (e *grpcStream) RedisFigures(context.Context) (redisinfo.Sample, bool, error) {
	return redisinfo.Sample{}, false, nil
}

// ---- the load ----

// StreamResult is one measured streaming run of one system.
type StreamResult struct {
	Messages      int // messages the run was to carry (each way, for ping-pong)
	Received      int // messages that arrived (server streaming) or rounds done
	Size          int // payload bytes per message
	Errors        int
	FirstErr      error
	Elapsed       time.Duration
	P50, P99      time.Duration // round trips; ping-pong only
	ProcessCPU    time.Duration // this process's user+system CPU; -1: not measured
	RedisCPU      time.Duration // redis-server's; -1: no Redis
	RedisCommands int64         // commands Redis executed; -1: no Redis
}

// PerSecond is messages (or rounds) carried per second.
func (r StreamResult) PerSecond() float64 { return float64(r.Received) / r.Elapsed.Seconds() }

// MBPerSecond is payload megabytes (10^6 bytes) carried per second, one
// way.
func (r StreamResult) MBPerSecond() float64 { return r.PerSecond() * float64(r.Size) / 1e6 }

// PerMessage returns d per message (or round) in microseconds, -1 when d
// is -1.
func (r StreamResult) PerMessage(d time.Duration) float64 {
	if d < 0 || r.Received == 0 {
		return -1
	}
	return float64(d.Nanoseconds()) / 1e3 / float64(r.Received)
}

// CommandsPerMessage is Redis commands per message (or round); -1 without
// Redis.
func (r StreamResult) CommandsPerMessage() float64 {
	if r.RedisCommands < 0 || r.Received == 0 {
		return -1
	}
	return float64(r.RedisCommands) / float64(r.Received)
}

// measure runs work once unmeasured (warmup) and once measured, sampling
// CPU and Redis around the measured run.
func measure(ctx context.Context, sys Streamer, warmup, work func() (int, error)) (StreamResult, error) {
	if _, err := warmup(); err != nil {
		return StreamResult{}, fmt.Errorf("warm-up: %w", err)
	}
	runtime.GC()
	before, hasRedis, err := sys.RedisFigures(ctx)
	if err != nil {
		return StreamResult{}, fmt.Errorf("INFO: %w", err)
	}
	cpuBefore := ProcessCPU()
	start := time.Now()
	received, werr := work()
	elapsed := time.Since(start)
	cpuAfter := ProcessCPU()
	after, _, err := sys.RedisFigures(ctx)
	if err != nil {
		return StreamResult{}, fmt.Errorf("INFO: %w", err)
	}
	r := StreamResult{Received: received, Elapsed: elapsed, ProcessCPU: -1, RedisCPU: -1, RedisCommands: -1, FirstErr: werr}
	if werr != nil {
		r.Errors = 1
	}
	if cpuBefore >= 0 && cpuAfter >= 0 {
		r.ProcessCPU = cpuAfter - cpuBefore
	}
	if hasRedis {
		d := after.Sub(before)
		r.RedisCPU, r.RedisCommands = d.CPU, d.Commands
	}
	return r, nil
}

// MeasureFeed receives messages messages of size bytes over streams
// concurrent server streams (messages/streams each), after a warm-up of a
// tenth of that.
func MeasureFeed(ctx context.Context, sys Streamer, streams, messages, size int) (StreamResult, error) {
	run := func(total int) (int, error) {
		var mu sync.Mutex
		var got int
		var firstErr error
		var wg sync.WaitGroup
		for i := range streams {
			n := total / streams
			if i < total%streams {
				n++
			}
			wg.Go(func() {
				k, err := sys.Feed(ctx, n, size)
				mu.Lock()
				got += k
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		return got, firstErr
	}
	r, err := measure(ctx, sys, func() (int, error) { return run(max(messages/10, streams)) }, func() (int, error) { return run(messages) })
	r.Messages, r.Size = messages, size
	if err == nil && r.FirstErr == nil && r.Received != messages {
		r.Errors, r.FirstErr = 1, fmt.Errorf("%d of %d messages arrived", r.Received, messages)
	}
	return r, err
}

// MeasurePingPong makes rounds round trips of size bytes on one
// bidirectional stream, after a warm-up of a tenth of that, and reports
// exact round-trip quantiles.
func MeasurePingPong(ctx context.Context, sys Streamer, rounds, size int) (StreamResult, error) {
	rtts := make([]time.Duration, rounds)
	r, err := measure(ctx, sys,
		func() (int, error) { return max(rounds/10, 1), sys.PingPong(ctx, max(rounds/10, 1), size, nil) },
		func() (int, error) {
			if err := sys.PingPong(ctx, rounds, size, rtts); err != nil {
				return 0, err
			}
			return rounds, nil
		})
	r.Messages, r.Size = rounds, size
	if err == nil && r.FirstErr == nil {
		slices.Sort(rtts)
		r.P50, r.P99 = rtts[rounds/2], rtts[min(rounds*99/100, rounds-1)]
	}
	return r, err
}
