package ingress

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestGRPCCallOrStream checks how the ingress sends each kind of call:
// as a Call when the caller sent one message and closed within the
// waits, else as a Stream; and that a caller slower than the waits still
// gets its answer.
func TestGRPCCallOrStream(t *testing.T) {
	// Waits that a loaded test machine keeps to, so that what is tested
	// is the decision, not the machine's speed.
	w := newGRPCWorld(t, func(h *grpcHandler) { h.firstWait, h.grace = time.Second, 50*time.Millisecond })
	tc := testgrpc.NewTestServiceClient(w.native)
	ctx := context.Background()
	grpcLog.run(t, func() { interop.DoEmptyUnaryCall(ctx, tc) }) // the first call of a fresh egress can be slow
	cases := []struct {
		name  string
		run   func()
		wantS int64 // Streams among the calls
		wantC int64
	}{
		{"unary", func() { interop.DoLargeUnaryCall(ctx, tc) }, 0, 1},
		{"server streaming", func() { interop.DoServerStreaming(ctx, tc) }, 0, 1},
		{"client streaming", func() { interop.DoClientStreaming(ctx, tc) }, 1, 0},
		{"bidi, caller waits (the grace passes)", func() { interop.DoPingPong(ctx, tc) }, 1, 0},
		{"bidi, known to stream", func() { interop.DoPingPong(ctx, tc) }, 1, 0},
		{"bidi, no message", func() { interop.DoEmptyStream(ctx, tc) }, 1, 0},
		{"unary, both kinds of status", func() { interop.DoStatusCodeAndMessage(ctx, tc) }, 1, 1},
		{"unary, close slower than the grace", func() { slowUnary(t, w) }, 1, 0},
	}
	for _, c := range cases {
		calls, streams := w.ingress.asCall.Load(), w.ingress.asStream.Load()
		grpcLog.run(t, c.run)
		if dc, ds := w.ingress.asCall.Load()-calls, w.ingress.asStream.Load()-streams; dc != c.wantC || ds != c.wantS {
			t.Errorf("%s: sent as %d Calls and %d Streams, want %d and %d", c.name, dc, ds, c.wantC, c.wantS)
		}
	}
	if !w.ingress.streaming.has("/grpc.testing.TestService/FullDuplexCall") || w.ingress.streaming.has("/grpc.testing.TestService/UnaryCall") {
		t.Errorf("methods known to stream: %v, want FullDuplexCall and not UnaryCall", w.ingress.streaming.m)
	}
	checkNoRelays(t)

	// Stop ends a call in flight: its caller gets UNAVAILABLE and the
	// upstream's handler is cancelled.
	s, err := tc.HalfDuplexCall(metadata.AppendToOutgoingContext(ctx, caseKey, "block"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Header(); err != nil {
		t.Fatal(err)
	}
	w.ingress.Stop()
	if _, err := s.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("after Stop: %v, want UNAVAILABLE", err)
	}
	select {
	case <-w.up.ended:
	case <-time.After(5 * time.Second):
		t.Error("the upstream's handler still runs 5s after the ingress stopped")
	}
	checkNoRelays(t)
}

// slowUnary calls UnaryCall as a stream whose caller closes its side only
// after the grace: the ingress has sent it as a Stream by then, and the
// answer still comes.
func slowUnary(t *testing.T, w *grpcWorld) {
	t.Helper()
	s, err := w.native.NewStream(context.Background(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/grpc.testing.TestService/UnaryCall")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(&testgrpc.SimpleRequest{ResponseSize: 5}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * w.ingress.grace)
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	reply := new(testgrpc.SimpleResponse)
	if err := s.RecvMsg(reply); err != nil || len(reply.GetPayload().GetBody()) != 5 {
		t.Fatalf("RecvMsg: %v, %d bytes; want a 5-byte payload", err, len(reply.GetPayload().GetBody()))
	}
	if err := s.RecvMsg(reply); !errors.Is(err, io.EOF) {
		t.Fatalf("after the reply: %v, want io.EOF", err)
	}
}
