package tunnel_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

// countingClientStream sees every message of a stream it wraps.
type countingClientStream struct {
	tunnel.ClientStream
	mu         sync.Mutex
	sent, recv int
}

func (s *countingClientStream) SendMsg(m proto.Message) error {
	err := s.ClientStream.SendMsg(m)
	if err == nil {
		s.mu.Lock()
		s.sent++
		s.mu.Unlock()
	}
	return err
}

func (s *countingClientStream) RecvMsg(m proto.Message) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		s.mu.Lock()
		s.recv++
		s.mu.Unlock()
	}
	return err
}

// prefixingServerStream rewrites what a handler sends.
type prefixingServerStream struct {
	tunnel.ServerStream
	prefix string
	recv   *atomic.Int64
}

func (s *prefixingServerStream) SendMsg(m proto.Message) error {
	v := m.(*sv)
	return s.ServerStream.SendMsg(wrapperspb.String(s.prefix + v.GetValue()))
}

func (s *prefixingServerStream) RecvMsg(m proto.Message) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.recv.Add(1)
	}
	return err
}

// TestStreamInterceptors checks both sides' stream interceptors: they run
// in order, the first outermost; a client one may add metadata and wrap
// the ClientStream to see every message; a server one learns the method
// and its kind, may wrap the ServerStream, and may refuse the stream with
// a status the caller gets as it is.
func TestStreamInterceptors(t *testing.T) {
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	var infos []tunnel.StreamServerInfo
	var serverRecv atomic.Int64
	server := tunnel.ServerOptions{StreamInterceptors: []tunnel.StreamServerInterceptor{
		func(srv any, ss tunnel.ServerStream, info *tunnel.StreamServerInfo, handler tunnel.StreamHandler) error {
			note("server outer")
			mu.Lock()
			infos = append(infos, *info)
			mu.Unlock()
			if md := tunnel.HeaderFromContext(ss.Context()); md.Get("deny") != "" {
				return tunnel.Errorf(tunnel.PermissionDenied, "streams with deny are refused")
			}
			return handler(srv, ss)
		},
		func(srv any, ss tunnel.ServerStream, info *tunnel.StreamServerInfo, handler tunnel.StreamHandler) error {
			note("server inner")
			return handler(srv, &prefixingServerStream{ServerStream: ss, prefix: "<" + tunnel.HeaderFromContext(ss.Context()).Get("tag") + ">", recv: &serverRecv})
		},
	}}
	var counted *countingClientStream
	client := tunnel.ClientOptions{StreamInterceptors: []tunnel.StreamClientInterceptor{
		func(ctx context.Context, m *tunnel.MethodDesc, streamer tunnel.Streamer, opts ...tunnel.CallOption) (tunnel.ClientStream, error) {
			note("client outer " + m.Name)
			return streamer(ctx, m, append(opts, tunnel.WithHeader("tag", "t1"))...)
		},
		func(ctx context.Context, m *tunnel.MethodDesc, streamer tunnel.Streamer, opts ...tunnel.CallOption) (tunnel.ClientStream, error) {
			note("client inner " + m.Name)
			s, err := streamer(ctx, m, opts...)
			if err != nil {
				return nil, err
			}
			counted = &countingClientStream{ClientStream: s}
			return counted, nil
		},
	}}
	e := newStreamEnv(t, server, client)
	ctx := context.Background()

	mu.Lock()
	order, infos = nil, nil // forget the warm-up stream
	mu.Unlock()
	serverRecv.Store(0)
	s, err := e.client.NewStream(ctx, streamMethod("Chat"))
	if err != nil {
		t.Fatal(err)
	}
	chat := &tunnel.GenericClientStream[sv, sv]{ClientStream: s}
	var got []string
	for _, text := range []string{"a", "b", "c"} {
		if err := chat.Send(wrapperspb.String(text)); err != nil {
			t.Fatal(err)
		}
		reply, err := chat.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, reply.GetValue())
	}
	if err := chat.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := recvAll(chat); err != nil {
		t.Fatal(err)
	}
	if want := []string{"<t1>echo: a", "<t1>echo: b", "<t1>echo: c"}; !slices.Equal(got, want) {
		t.Errorf("replies = %q, want %q (the server interceptor's stream and the client's header)", got, want)
	}
	if counted.sent != 3 || counted.recv != 3 || serverRecv.Load() != 3 {
		t.Errorf("wrapped streams counted client sent %d, received %d, server received %d; want 3 each", counted.sent, counted.recv, serverRecv.Load())
	}
	mu.Lock()
	if want := []string{"client outer Chat", "client inner Chat", "server outer", "server inner"}; !slices.Equal(order, want) {
		t.Errorf("interceptors ran %q, want %q", order, want)
	}
	if len(infos) != 1 || infos[0].FullMethod != streamService+"/Chat" || !infos[0].IsClientStream || !infos[0].IsServerStream || infos[0].Server != any(e.impl) {
		t.Errorf("StreamServerInfo = %+v, want Chat, both sides streaming, the implementation", infos)
	}
	mu.Unlock()

	// A server interceptor's refusal is the stream's status.
	deny, err := e.count(ctx, 5, tunnel.WithHeader("deny", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := recvAll(deny); tunnel.CodeOf(err) != tunnel.PermissionDenied || !strings.Contains(err.Error(), "streams with deny are refused") || len(got) != 0 {
		t.Errorf("refused stream: %d messages, %v; want PERMISSION_DENIED and none", len(got), err)
	}
}
