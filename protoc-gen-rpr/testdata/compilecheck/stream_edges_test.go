package compilecheck

// Streaming methods at the edges: names that are Go keywords, methods left
// unimplemented, and streams that fail or end before their first message.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	streamingv1 "example.com/rprtest/streaming/v1"
	"github.com/rprtunnel/rpr/tunnel"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// keywords implements two of Keywords' methods, whose names are Go
// keywords.
type keywords struct {
	streamingv1.UnimplementedKeywordsServer
}

func (keywords) Go(_ *emptypb.Empty, stream streamingv1.Keywords_GoServer) error {
	return stream.Send(&emptypb.Empty{})
}

func (keywords) Select(stream streamingv1.Keywords_SelectServer) error {
	for {
		in, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&streamingv1.Stream{Name: strings.ToUpper(in.GetName())}); err != nil {
			return err
		}
	}
}

func TestKeywordStreams(t *testing.T) {
	conn := &fakeConn{t: t, impl: keywords{}}
	client := streamingv1.NewKeywordsClient(conn)
	goStream, err := client.Go(testContext(t), &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := goStream.Recv(); err != nil {
		t.Fatalf("Go: Recv() = %v", err)
	}
	if _, err := goStream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("Go: second Recv() = %v, want io.EOF", err)
	}

	sel, err := client.Select(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := sel.Send(&streamingv1.Stream{Name: "case"}); err != nil {
		t.Fatal(err)
	}
	if got, err := sel.Recv(); err != nil || got.GetName() != "CASE" {
		t.Fatalf("Select: Recv() = %v, %v; want CASE", got, err)
	}

	// The methods keywords does not implement answer UNIMPLEMENTED.
	stream, err := client.Stream(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); tunnel.CodeOf(err) != tunnel.Unimplemented {
		t.Errorf("Stream: Recv() = %v, want UNIMPLEMENTED", err)
	}
	want := []string{
		streamingv1.Keywords_Go_FullMethodName,
		streamingv1.Keywords_Select_FullMethodName,
		streamingv1.Keywords_Stream_FullMethodName,
	}
	if fmt.Sprint(conn.calls) != fmt.Sprint(want) {
		t.Errorf("calls = %v, want %v", conn.calls, want)
	}
	if got := streamingv1.Keywords_Go_FullMethodName; got != "rprtest.streaming.v1.Keywords/go" {
		t.Errorf("Keywords_Go_FullMethodName = %q, want the proto name", got)
	}
}

// unimplementedFeeds implements none of Feeds' methods.
type unimplementedFeeds struct {
	streamingv1.UnimplementedFeedsServer
}

func TestUnimplementedStreams(t *testing.T) {
	client, _ := feedsClient(t, unimplementedFeeds{})
	ctx := testContext(t)

	watch, err := client.Watch(ctx, &streamingv1.WatchRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); tunnel.CodeOf(err) != tunnel.Unimplemented || !strings.Contains(err.Error(), "method Watch not implemented") {
		t.Errorf("Watch: Recv() = %v, want UNIMPLEMENTED", err)
	}

	upload, err := client.Upload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := upload.CloseAndRecv(); tunnel.CodeOf(err) != tunnel.Unimplemented {
		t.Errorf("Upload: CloseAndRecv() = %v, want UNIMPLEMENTED", err)
	}

	chat, err := client.Chat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chat.Recv(); tunnel.CodeOf(err) != tunnel.Unimplemented {
		t.Errorf("Chat: Recv() = %v, want UNIMPLEMENTED", err)
	}
}

// recvFails is a tunnel.ServerStream whose RecvMsg fails; it has no other
// method a handler may use.
type recvFails struct {
	tunnel.ServerStream
	err error
}

func (s recvFails) RecvMsg(proto.Message) error { return s.err }

// watchCalled is a Feeds implementation that records whether Watch ran.
type watchCalled struct {
	streamingv1.UnimplementedFeedsServer
	called *bool
}

func (w watchCalled) Watch(*streamingv1.WatchRequest, streamingv1.Feeds_WatchServer) error {
	*w.called = true
	return nil
}

func TestServerStreamingHandlerRecvFails(t *testing.T) {
	// The handler of a server-streaming method receives the one request
	// before it calls the implementation; when that fails, the
	// implementation does not run and the error is the handler's.
	errRecv := tunnel.Errorf(tunnel.DataLoss, "request lost")
	called := false
	watch := streamingv1.Feeds_ServiceDesc.Methods[1]
	if err := watch.StreamHandler(watchCalled{called: &called}, recvFails{err: errRecv}); err != errRecv {
		t.Errorf("StreamHandler = %v, want %v", err, errRecv)
	}
	if called {
		t.Error("Watch ran without its request")
	}
}

// endedStream is a tunnel.ClientStream that has ended with a status
// before anything was sent: SendMsg returns io.EOF, RecvMsg the status.
type endedStream struct {
	tunnel.ClientStream
	status error
}

func (endedStream) SendMsg(proto.Message) error   { return io.EOF }
func (s endedStream) RecvMsg(proto.Message) error { return s.status }

// endedConn opens endedStreams.
type endedConn struct {
	tunnel.ClientConn
	status error
}

func (c endedConn) NewStream(context.Context, *tunnel.MethodDesc, ...tunnel.CallOption) (tunnel.ClientStream, error) {
	return endedStream{status: c.status}, nil
}

func TestServerStreamingEndedBeforeRequest(t *testing.T) {
	// A stream that ended before its request went out is returned, so that
	// Recv gives the stream's status, not the io.EOF of SendMsg.
	status := tunnel.Errorf(tunnel.ResourceExhausted, "too many streams")
	stream, err := streamingv1.NewFeedsClient(endedConn{status: status}).Watch(testContext(t), &streamingv1.WatchRequest{})
	if err != nil {
		t.Fatalf("Watch = %v, want the stream", err)
	}
	if _, err := stream.Recv(); err != status {
		t.Errorf("Recv() = %v, want %v", err, status)
	}
}

func TestNewStreamFails(t *testing.T) {
	// fakeConn without a test refuses to stream: the client methods return
	// NewStream's error and no stream.
	client := streamingv1.NewFeedsClient(&fakeConn{})
	if s, err := client.Watch(testContext(t), &streamingv1.WatchRequest{}); s != nil || tunnel.CodeOf(err) != tunnel.Internal {
		t.Errorf("Watch = %v, %v; want no stream and NewStream's error", s, err)
	}
	if s, err := client.Upload(testContext(t)); s != nil || tunnel.CodeOf(err) != tunnel.Internal {
		t.Errorf("Upload = %v, %v; want no stream and NewStream's error", s, err)
	}
}
