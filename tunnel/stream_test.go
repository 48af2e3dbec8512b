package tunnel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// The stream test service, described by hand as generated code would:
// Count streams N replies to one request, Sum takes a stream of requests
// and answers once, Chat echoes each message it gets.
const streamService = "test.v1.Streams"

var streamInfo = tunnel.ServiceInfo{Name: streamService}

type (
	sv          = wrapperspb.StringValue
	countServer = tunnel.ServerStreamingServer[sv]
	sumServer   = tunnel.ClientStreamingServer[sv, sv]
	chatServer  = tunnel.BidiStreamingServer[sv, sv]
)

// streamsImpl implements the test service; hooks let a test change what a
// method does.
type streamsImpl struct {
	count func(in *sv, s countServer) error
	sum   func(s sumServer) error
	chat  func(s chatServer) error
}

var streamsDesc = tunnel.ServiceDesc{
	Service: &streamInfo,
	Methods: []tunnel.MethodDesc{
		{Service: &streamInfo, Name: "Count", ServerStreams: true, StreamHandler: func(impl any, s tunnel.ServerStream) error {
			in := new(sv)
			if err := s.RecvMsg(in); err != nil {
				return err
			}
			return impl.(*streamsImpl).count(in, &tunnel.GenericServerStream[sv, sv]{ServerStream: s})
		}},
		{Service: &streamInfo, Name: "Sum", ClientStreams: true, StreamHandler: func(impl any, s tunnel.ServerStream) error {
			return impl.(*streamsImpl).sum(&tunnel.GenericServerStream[sv, sv]{ServerStream: s})
		}},
		{Service: &streamInfo, Name: "Chat", ClientStreams: true, ServerStreams: true, StreamHandler: func(impl any, s tunnel.ServerStream) error {
			return impl.(*streamsImpl).chat(&tunnel.GenericServerStream[sv, sv]{ServerStream: s})
		}},
	},
}

func streamMethod(name string) *tunnel.MethodDesc {
	for i := range streamsDesc.Methods {
		if streamsDesc.Methods[i].Name == name {
			return &streamsDesc.Methods[i]
		}
	}
	panic(name)
}

// defaultStreams is the test service's default behaviour.
func defaultStreams() *streamsImpl {
	return &streamsImpl{
		count: func(in *sv, s countServer) error {
			n, err := strconv.Atoi(in.GetValue())
			if err != nil {
				return tunnel.Errorf(tunnel.InvalidArgument, "not a count: %q", in.GetValue())
			}
			for i := range n {
				if err := s.Send(wrapperspb.String(strconv.Itoa(i))); err != nil {
					return err
				}
			}
			return nil
		},
		sum: func(s sumServer) error {
			var parts []string
			for {
				in, err := s.Recv()
				if errors.Is(err, io.EOF) {
					return s.SendAndClose(wrapperspb.String(strings.Join(parts, "+")))
				}
				if err != nil {
					return err
				}
				parts = append(parts, in.GetValue())
			}
		},
		chat: func(s chatServer) error {
			for {
				in, err := s.Recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				if err := s.Send(wrapperspb.String("echo: " + in.GetValue())); err != nil {
					return err
				}
			}
		},
	}
}

// streamEnv is a Redis, a server of the stream service and a client.
type streamEnv struct {
	rdb    redis.UniversalClient
	client *tunnel.Client
	impl   *streamsImpl
}

func newStreamEnv(t *testing.T, server tunnel.ServerOptions, client tunnel.ClientOptions) *streamEnv {
	t.Helper()
	rs := redistest.Start(t)
	e := &streamEnv{rdb: rs.Client(t), impl: defaultStreams()}
	quiet := slog.New(slog.DiscardHandler)
	if server.Logger == nil {
		server.Logger = quiet
	}
	startServer(t, e.rdb, server, func(s *tunnel.Server) { s.RegisterService(&streamsDesc, e.impl) })
	if client.Logger == nil {
		client.Logger = quiet
	}
	var err error
	e.client, err = tunnel.NewClient(rs.Client(t), client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.client.Close() })
	waitFor(t, "a stream to work", func() bool {
		s, err := e.count(context.Background(), 0)
		if err != nil {
			return false
		}
		_, err = recvAll(s)
		return err == nil
	})
	return e
}

// count opens Count for n replies.
func (e *streamEnv) count(ctx context.Context, n int, opts ...tunnel.CallOption) (tunnel.ServerStreamingClient[sv], error) {
	s, err := e.client.NewStream(ctx, streamMethod("Count"), opts...)
	if err != nil {
		return nil, err
	}
	x := &tunnel.GenericClientStream[sv, sv]{ClientStream: s}
	if err := x.SendMsg(wrapperspb.String(strconv.Itoa(n))); err != nil {
		return nil, err
	}
	if err := x.CloseSend(); err != nil {
		return nil, err
	}
	return x, nil
}

func recvAll(s interface{ Recv() (*sv, error) }) ([]string, error) {
	var out []string
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m.GetValue())
	}
}

func TestServerStreamInOrder(t *testing.T) {
	e := newStreamEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{StreamWindow: tunnel.StreamWindow{Messages: 8}})
	ctx := context.Background()
	s, err := e.count(ctx, 200)
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvAll(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 200 {
		t.Fatalf("received %d messages, want 200", len(got))
	}
	for i, m := range got {
		if m != strconv.Itoa(i) {
			t.Fatalf("message %d is %q: out of order", i, m)
		}
	}
}

func TestClientStreamAndBidi(t *testing.T) {
	e := newStreamEnv(t, tunnel.ServerOptions{StreamWindow: tunnel.StreamWindow{Messages: 4}}, tunnel.ClientOptions{})
	ctx := context.Background()
	s, err := e.client.NewStream(ctx, streamMethod("Sum"))
	if err != nil {
		t.Fatal(err)
	}
	sum := &tunnel.GenericClientStream[sv, sv]{ClientStream: s}
	var want []string
	for i := range 50 {
		want = append(want, strconv.Itoa(i))
		if err := sum.Send(wrapperspb.String(strconv.Itoa(i))); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	reply, err := sum.CloseAndRecv()
	if err != nil || reply.GetValue() != strings.Join(want, "+") {
		t.Fatalf("Sum = %q, %v", reply.GetValue(), err)
	}

	s, err = e.client.NewStream(ctx, streamMethod("Chat"))
	if err != nil {
		t.Fatal(err)
	}
	chat := &tunnel.GenericClientStream[sv, sv]{ClientStream: s}
	for i := range 20 { // ping-pong
		if err := chat.Send(wrapperspb.String(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		got, err := chat.Recv()
		if err != nil || got.GetValue() != fmt.Sprintf("echo: %d", i) {
			t.Fatalf("ping %d: %q, %v", i, got.GetValue(), err)
		}
	}
	if err := chat.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := chat.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want io.EOF", err)
	}
}

func TestStreamErrorAndCancel(t *testing.T) {
	e := newStreamEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{})
	ctx := context.Background()
	s, err := e.count(ctx, -1)
	if err != nil {
		t.Fatal(err)
	}
	_ = s
	bad, err := e.count(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := recvAll(bad); err != nil || len(got) != 0 {
		t.Fatalf("empty stream: %v, %v", got, err)
	}
	notCount, err := e.client.NewStream(ctx, streamMethod("Count"))
	if err != nil {
		t.Fatal(err)
	}
	x := &tunnel.GenericClientStream[sv, sv]{ClientStream: notCount}
	_ = x.SendMsg(wrapperspb.String("nope"))
	_ = x.CloseSend()
	if _, err := x.Recv(); tunnel.CodeOf(err) != tunnel.InvalidArgument {
		t.Fatalf("bad count: %v, want INVALID_ARGUMENT", err)
	}

	// Cancel after the first response: the handler's context ends.
	handlerDone := make(chan error, 1)
	var once sync.Once
	e.impl.count = func(in *sv, s countServer) error {
		_ = s.Send(wrapperspb.String("first"))
		<-s.Context().Done()
		once.Do(func() { handlerDone <- context.Cause(s.Context()) })
		return s.Context().Err()
	}
	cctx, cancel := context.WithCancel(ctx)
	c, err := e.count(cctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := c.Recv(); err != nil || m.GetValue() != "first" {
		t.Fatalf("first: %v %v", m, err)
	}
	cancel()
	if _, err := c.Recv(); tunnel.CodeOf(err) != tunnel.Canceled || tunnel.NotExecuted(err) {
		t.Fatalf("after cancel: %v, want CANCELED that may have executed", err)
	}
	select {
	case cause := <-handlerDone:
		t.Logf("handler ended: %v", cause)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end after the caller cancelled")
	}
}
