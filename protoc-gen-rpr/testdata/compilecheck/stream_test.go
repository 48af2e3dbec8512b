package compilecheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	commonv1 "example.com/rprtest/common/v1"
	streamingv1 "example.com/rprtest/streaming/v1"
	tunnelpb "example.com/rprtest/tunnel"
	"github.com/rprtunnel/rpr/tunnel"
	"google.golang.org/protobuf/types/known/emptypb"
)

// The generated streaming methods have grpc-go's signatures, with tunnel's
// generic stream types.
var (
	_ func(streamingv1.FeedsClient, context.Context, *streamingv1.WatchRequest, ...tunnel.CallOption) (tunnel.ServerStreamingClient[streamingv1.Event], error)   = streamingv1.FeedsClient.Watch
	_ func(streamingv1.FeedsClient, context.Context, ...tunnel.CallOption) (tunnel.ClientStreamingClient[streamingv1.Chunk, streamingv1.UploadSummary], error)   = streamingv1.FeedsClient.Upload
	_ func(streamingv1.FeedsClient, context.Context, ...tunnel.CallOption) (tunnel.BidiStreamingClient[streamingv1.ChatMessage, streamingv1.ChatMessage], error) = streamingv1.FeedsClient.Chat

	_ func(streamingv1.FeedsServer, *streamingv1.WatchRequest, tunnel.ServerStreamingServer[streamingv1.Event]) error   = streamingv1.FeedsServer.Watch
	_ func(streamingv1.FeedsServer, tunnel.ClientStreamingServer[streamingv1.Chunk, streamingv1.UploadSummary]) error   = streamingv1.FeedsServer.Upload
	_ func(streamingv1.FeedsServer, tunnel.BidiStreamingServer[streamingv1.ChatMessage, streamingv1.ChatMessage]) error = streamingv1.FeedsServer.Chat
)

// The grpc-go names of the stream types are aliases, not new types: a
// function type that uses one is identical to one that uses the generic
// type, which a defined type would not be.
var (
	_ func() streamingv1.Feeds_WatchClient  = func() tunnel.ServerStreamingClient[streamingv1.Event] { return nil }
	_ func() streamingv1.Feeds_WatchServer  = func() tunnel.ServerStreamingServer[streamingv1.Event] { return nil }
	_ func() streamingv1.Feeds_UploadClient = func() tunnel.ClientStreamingClient[streamingv1.Chunk, streamingv1.UploadSummary] { return nil }
	_ func() streamingv1.Feeds_UploadServer = func() tunnel.ClientStreamingServer[streamingv1.Chunk, streamingv1.UploadSummary] { return nil }
	_ func() streamingv1.Feeds_ChatClient   = func() tunnel.BidiStreamingClient[streamingv1.ChatMessage, streamingv1.ChatMessage] { return nil }
	_ func() streamingv1.Feeds_ChatServer   = func() tunnel.BidiStreamingServer[streamingv1.ChatMessage, streamingv1.ChatMessage] { return nil }
	_ func() streamingv1.Keywords_GoServer  = func() tunnel.ServerStreamingServer[emptypb.Empty] { return nil }
)

// feeds implements the Feeds service, as a grpc-go implementation would be
// written (with the old stream names, which are aliases).
type feeds struct {
	streamingv1.UnimplementedFeedsServer
}

func (feeds) Watch(req *streamingv1.WatchRequest, stream streamingv1.Feeds_WatchServer) error {
	if err := stream.SetHeader(tunnel.Metadata{"from": {fmt.Sprint(req.GetFrom())}}); err != nil {
		return err
	}
	for i := range int64(req.GetCount()) {
		seq := req.GetFrom() + i
		if err := stream.Send(&streamingv1.Event{Seq: seq, Text: fmt.Sprintf("event %d", seq)}); err != nil {
			return err
		}
	}
	stream.SetTrailer(tunnel.Metadata{"sent": {fmt.Sprint(req.GetCount())}})
	return nil
}

func (feeds) Upload(stream streamingv1.Feeds_UploadServer) error {
	summary := &streamingv1.UploadSummary{}
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(summary)
		}
		if err != nil {
			return err
		}
		summary.Chunks++
		summary.Bytes += int64(len(chunk.GetData()))
		summary.Data = append(summary.Data, chunk.GetData()...)
	}
}

func (feeds) Chat(stream streamingv1.Feeds_ChatServer) error {
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if msg.GetText() == "fail" {
			return tunnel.Errorf(tunnel.InvalidArgument, "no failing here")
		}
		if err := stream.Send(&streamingv1.ChatMessage{Text: "re: " + msg.GetText()}); err != nil {
			return err
		}
	}
}

func (feeds) Ticks(_ *emptypb.Empty, stream tunnel.ServerStreamingServer[emptypb.Empty]) error {
	for range 3 {
		if err := stream.Send(&emptypb.Empty{}); err != nil {
			return err
		}
	}
	return nil
}

func (feeds) Drain(stream tunnel.ClientStreamingServer[emptypb.Empty, emptypb.Empty]) error {
	n := 0
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			stream.SetTrailer(tunnel.Metadata{"drained": {fmt.Sprint(n)}})
			return stream.SendAndClose(&emptypb.Empty{})
		}
		if err != nil {
			return err
		}
		n++
	}
}

func (feeds) Exchange(stream tunnel.BidiStreamingServer[commonv1.Money, commonv1.Money]) error {
	for {
		in, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&commonv1.Money{Currency: "EUR", Units: in.GetUnits() * 2}); err != nil {
			return err
		}
	}
}

func (feeds) Relay(p *tunnelpb.Packet, stream tunnel.ServerStreamingServer[tunnelpb.Packet]) error {
	for i := range p.GetData() {
		if err := stream.Send(&tunnelpb.Packet{Data: p.GetData()[:i+1]}); err != nil {
			return err
		}
	}
	return nil
}

// OldUpload ends without a reply, which a client-streaming method must not
// do.
func (feeds) OldUpload(stream tunnel.ClientStreamingServer[streamingv1.Chunk, streamingv1.UploadSummary]) error {
	return nil
}

// feedsClient returns a Feeds client whose streams run on impl in process.
func feedsClient(t *testing.T, impl streamingv1.FeedsServer) (streamingv1.FeedsClient, *fakeConn) {
	conn := &fakeConn{t: t, impl: impl}
	return streamingv1.NewFeedsClient(conn), conn
}

// testContext is a context that ends with the test, and sooner than a
// stuck test would: a fake stream that hangs fails instead of blocking.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestStreamServiceDesc(t *testing.T) {
	desc := streamingv1.Feeds_ServiceDesc
	want := []struct {
		name                         string
		clientStreams, serverStreams bool
		timeout                      time.Duration
		idempotent, async            bool
	}{
		{"Get", false, false, time.Minute, true, false},
		{"Watch", false, true, time.Hour, true, false},
		{"Upload", true, false, time.Minute, false, false},
		{"Chat", true, true, time.Minute, false, false},
		{"Ticks", false, true, time.Minute, false, false},
		{"Drain", true, false, time.Minute, false, false},
		{"Pulse", true, true, time.Minute, false, false},
		{"Exchange", true, true, time.Minute, false, false},
		{"Relay", false, true, time.Minute, false, false},
		{"OldWatch", false, true, time.Minute, false, false},
		{"OldUpload", true, false, time.Minute, false, false},
		{"Notify", false, false, time.Minute, false, true},
	}
	if len(desc.Methods) != len(want) {
		t.Fatalf("%d methods, want %d", len(desc.Methods), len(want))
	}
	for i, w := range want {
		m := desc.Methods[i]
		streaming := w.clientStreams || w.serverStreams
		if m.Name != w.name || m.ClientStreams != w.clientStreams || m.ServerStreams != w.serverStreams || m.IsStreaming() != streaming ||
			m.Timeout != w.timeout || m.Idempotent != w.idempotent || m.Async != w.async || m.Service != &streamingv1.Feeds_ServiceInfo ||
			(m.Handler == nil) != streaming || (m.StreamHandler == nil) == streaming {
			t.Errorf("method %d = %+v, want %+v with a Handler if unary, else a StreamHandler", i, m, w)
		}
	}
	if info := streamingv1.Feeds_ServiceInfo; info.Name != "rprtest.streaming.v1.Feeds" || info.BizCode != "FEED" {
		t.Errorf("Feeds_ServiceInfo = %+v", info)
	}
	if got := streamingv1.Feeds_Watch_FullMethodName; got != "rprtest.streaming.v1.Feeds/Watch" {
		t.Errorf("Feeds_Watch_FullMethodName = %q", got)
	}
	r := &registrar{}
	streamingv1.RegisterFeedsServer(r, feeds{})
	if r.desc != &streamingv1.Feeds_ServiceDesc {
		t.Errorf("RegisterFeedsServer registered %v", r.desc)
	}
}

func TestServerStreaming(t *testing.T) {
	client, conn := feedsClient(t, feeds{})
	stream, err := client.Watch(testContext(t), &streamingv1.WatchRequest{From: 5, Count: 4})
	if err != nil {
		t.Fatal(err)
	}
	header, err := stream.Header()
	if err != nil || header.Get("from") != "5" {
		t.Errorf("Header() = %v, %v; want from: 5", header, err)
	}
	for want := int64(5); want < 9; want++ {
		event, err := stream.Recv()
		if err != nil || event.GetSeq() != want || event.GetText() != fmt.Sprintf("event %d", want) {
			t.Fatalf("Recv() = %v, %v; want event %d", event, err, want)
		}
	}
	for range 2 {
		if event, err := stream.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("Recv() after the last event = %v, %v; want io.EOF", event, err)
		}
	}
	if got := stream.Trailer().Get("sent"); got != "4" {
		t.Errorf("trailer sent: %q, want 4", got)
	}
	if len(conn.calls) != 1 || conn.calls[0] != streamingv1.Feeds_Watch_FullMethodName {
		t.Errorf("calls = %v", conn.calls)
	}
}

func TestClientStreaming(t *testing.T) {
	client, _ := feedsClient(t, feeds{})
	stream, err := client.Upload(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{"ab", "cd", "ef"} {
		if err := stream.Send(&streamingv1.Chunk{Data: []byte(data)}); err != nil {
			t.Fatalf("Send(%s): %v", data, err)
		}
	}
	summary, err := stream.CloseAndRecv()
	if err != nil || summary.GetChunks() != 3 || summary.GetBytes() != 6 || string(summary.GetData()) != "abcdef" {
		t.Fatalf("CloseAndRecv() = %v, %v; want 3 chunks, 6 bytes, abcdef in order", summary, err)
	}

	// A client-streaming handler that returns without SendAndClose leaves
	// the caller without a reply: CloseAndRecv says so.
	stream, err = client.OldUpload(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if summary, err := stream.CloseAndRecv(); tunnel.CodeOf(err) != tunnel.Internal {
		t.Errorf("CloseAndRecv() of a handler without reply = %v, %v; want INTERNAL", summary, err)
	}
}

func TestBidiStreaming(t *testing.T) {
	client, _ := feedsClient(t, feeds{})
	stream, err := client.Chat(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	// Ping-pong: each message is answered before the next goes.
	for _, text := range []string{"one", "two", "three"} {
		if err := stream.Send(&streamingv1.ChatMessage{Text: text}); err != nil {
			t.Fatalf("Send(%s): %v", text, err)
		}
		reply, err := stream.Recv()
		if err != nil || reply.GetText() != "re: "+text {
			t.Fatalf("Recv() = %v, %v; want re: %s", reply, err, text)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if reply, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("Recv() after CloseSend = %v, %v; want io.EOF", reply, err)
	}

	// All sent first, then all received: order is kept both ways, and the
	// handler's error is the stream's status.
	stream, err = client.Chat(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		for _, text := range []string{"a", "b", "c", "fail"} {
			if err := stream.Send(&streamingv1.ChatMessage{Text: text}); err != nil {
				sent <- err
				return
			}
		}
		sent <- stream.CloseSend()
	}()
	var got []string
	for {
		reply, err := stream.Recv()
		if err != nil {
			if tunnel.CodeOf(err) != tunnel.InvalidArgument || !strings.Contains(err.Error(), "no failing here") {
				t.Errorf("Recv() = %v; want the handler's INVALID_ARGUMENT", err)
			}
			break
		}
		got = append(got, reply.GetText())
	}
	if err := <-sent; err != nil {
		t.Errorf("sending: %v", err)
	}
	if strings.Join(got, ",") != "re: a,re: b,re: c" {
		t.Errorf("replies %q, want re: a, re: b, re: c in order", got)
	}
}

func TestEmptyMessageStreams(t *testing.T) {
	client, _ := feedsClient(t, feeds{})
	ticks, err := client.Ticks(testContext(t), &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		_, err := ticks.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 3 {
		t.Errorf("%d ticks, want 3", n)
	}

	drain, err := client.Drain(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := drain.Send(&emptypb.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	if reply, err := drain.CloseAndRecv(); err != nil || reply == nil {
		t.Fatalf("CloseAndRecv() = %v, %v", reply, err)
	}
	if got := drain.Trailer().Get("drained"); got != "4" {
		t.Errorf("drained %q, want 4", got)
	}
}

func TestStreamsOfOtherPackages(t *testing.T) {
	client, _ := feedsClient(t, feeds{})
	exchange, err := client.Exchange(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, units := range []int64{1, 20, 300} {
		if err := exchange.Send(&commonv1.Money{Currency: "USD", Units: units}); err != nil {
			t.Fatal(err)
		}
		got, err := exchange.Recv()
		if err != nil || got.GetCurrency() != "EUR" || got.GetUnits() != 2*units {
			t.Fatalf("Recv() = %v, %v; want %d EUR", got, err, 2*units)
		}
	}
	if err := exchange.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := exchange.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("Recv() after CloseSend: %v, want io.EOF", err)
	}

	relay, err := client.Relay(testContext(t), &tunnelpb.Packet{Data: []byte("xyz")})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		p, err := relay.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(p.GetData()))
	}
	if strings.Join(got, ",") != "x,xy,xyz" {
		t.Errorf("relayed %q, want x, xy, xyz", got)
	}
}
