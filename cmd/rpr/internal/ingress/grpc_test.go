package ingress

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/grpcraw"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestGRPCPassthrough runs gRPC's interop cases with stock grpc-go
// stubs, and cases of our own, through ingress, Redis and egress to a
// stock grpc-go server, once by each of the ingress's ways in.
func TestGRPCPassthrough(t *testing.T) {
	w := newGRPCWorld(t)
	t.Run("MessageLimit", func(t *testing.T) { testMessageLimit(t, w) })
	for _, conn := range w.conns() {
		t.Run(conn.name, func(t *testing.T) {
			tc := testgrpc.NewTestServiceClient(conn.cc)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			interopCases := []struct {
				name string
				run  func()
			}{
				{"EmptyUnary", func() { interop.DoEmptyUnaryCall(ctx, tc) }},
				{"LargeUnary", func() { interop.DoLargeUnaryCall(ctx, tc) }},
				{"ClientStreaming", func() { interop.DoClientStreaming(ctx, tc) }},
				{"ServerStreaming", func() { interop.DoServerStreaming(ctx, tc) }},
				{"PingPong", func() { interop.DoPingPong(ctx, tc) }},
				{"EmptyStream", func() { interop.DoEmptyStream(ctx, tc) }},
				{"CustomMetadata", func() { interop.DoCustomMetadata(ctx, tc) }},
				{"StatusCodeAndMessage", func() { interop.DoStatusCodeAndMessage(ctx, tc) }},
				{"SpecialStatusMessage", func() { interop.DoSpecialStatusMessage(ctx, tc) }},
				{"TimeoutOnSleepingServer", func() { interop.DoTimeoutOnSleepingServer(ctx, tc) }},
				{"CancelAfterBegin", func() { interop.DoCancelAfterBegin(ctx, tc) }},
				{"CancelAfterFirstResponse", func() { interop.DoCancelAfterFirstResponse(ctx, tc) }},
				{"UnimplementedMethod", func() { interop.DoUnimplementedMethod(ctx, conn.cc) }},
				{"UnimplementedService", func() { interop.DoUnimplementedService(ctx, testgrpc.NewUnimplementedServiceClient(conn.cc)) }},
				{"GzipLargeUnary", func() { interop.DoLargeUnaryCall(ctx, tc, grpc.UseCompressor("gzip")) }},
			}
			for _, c := range interopCases {
				t.Run("interop/"+c.name, func(t *testing.T) { grpcLog.run(t, c.run) })
			}
			t.Run("ErrorDetails", func(t *testing.T) { testErrorDetails(t, tc) })
			t.Run("Metadata", func(t *testing.T) { testMetadata(t, w, tc) })
			t.Run("HeaderTrailer", func(t *testing.T) { testHeaderTrailer(t, tc) })
			t.Run("Deadline", func(t *testing.T) { testDeadline(t, w, tc) })
			t.Run("CancelReachesUpstream", func(t *testing.T) { testCancelReachesUpstream(t, w, tc) })
			t.Run("NoRoute", func(t *testing.T) { testNoRoute(t, conn.cc) })
			t.Run("EgressNoRoute", func(t *testing.T) { testEgressNoRoute(t, conn.cc) })
			t.Run("UpstreamDown", func(t *testing.T) { testUpstreamDown(t, conn.cc) })
			t.Run("Loop", func(t *testing.T) { testLoop(t, conn.cc) })
			t.Run("NoEgress", func(t *testing.T) { testNoEgress(t, conn.cc) })
			t.Run("ContentSubtype", func(t *testing.T) { testContentSubtype(t, w, tc) })
			t.Run("Reflection", func(t *testing.T) { testReflection(t, conn.cc) })
			checkNoRelays(t)
		})
	}
}

// testErrorDetails: the upstream's status arrives with its code, message
// and details exactly, a detail of a type no program here links included.
func testErrorDetails(t *testing.T, tc testgrpc.TestServiceClient) {
	ctx := metadata.AppendToOutgoingContext(context.Background(), caseKey, "details")
	var trailer metadata.MD
	_, err := tc.EmptyCall(ctx, &testgrpc.Empty{}, grpc.Trailer(&trailer))
	got, want := status.Convert(err).Proto(), detailsStatus().Proto()
	if !proto.Equal(got, want) {
		t.Fatalf("status:\n got %v\nwant %v", got, want)
	}
	if trailer.Get(grpcraw.OutcomeKey) != nil {
		t.Errorf("an upstream's own error got an rpr outcome: %v", trailer)
	}
	if len(trailer.Get(grpcraw.RequestIDKey)) != 1 {
		t.Errorf("trailer %v: want one %s", trailer, grpcraw.RequestIDKey)
	}
}

// testMetadata: the caller's metadata reaches the upstream, binary and
// repeated values as they were, without the keys rpr and gRPC keep back,
// with the request id and the caller's trace.
func testMetadata(t *testing.T, w *grpcWorld, tc testgrpc.TestServiceClient) {
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	ctx := metadata.AppendToOutgoingContext(context.Background(),
		"x-bin-bin", "\x00\xff\x01rpr",
		"x-multi", "a", "x-multi", "b",
		"traceparent", "00-"+traceID+"-00f067aa0ba902b7-01",
		grpcraw.MethodHeader, "/evil.Service/Steal", // a caller cannot pick another method,
		"x-rpr-caller", "someone-else", // nor its rate-limit identity
	)
	if _, err := tc.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	md, _ := w.up.last()
	if got := md.Get("x-bin-bin"); len(got) != 1 || got[0] != "\x00\xff\x01rpr" {
		t.Errorf("x-bin-bin: got %q", got)
	}
	if got := strings.Join(md.Get("x-multi"), ","); got != "a,b" {
		t.Errorf("x-multi: got %q, want a,b", got)
	}
	for k := range md {
		if strings.HasPrefix(k, "rpr-") || strings.HasPrefix(k, "x-rpr-") && k != grpcraw.RequestIDKey && k != grpcraw.HopsKey {
			t.Errorf("rpr's own header %s reached the upstream", k)
		}
	}
	if got := md.Get(grpcraw.HopsKey); len(got) != 1 || got[0] != "1" {
		t.Errorf("%s: got %q, want 1 (one tunnel crossed)", grpcraw.HopsKey, got)
	}
	if got := md.Get(grpcraw.RequestIDKey); len(got) != 1 || got[0] == "" {
		t.Errorf("%s: got %q", grpcraw.RequestIDKey, got)
	}
	if tp := md.Get("traceparent"); len(tp) != 1 || !strings.Contains(tp[0], traceID) {
		t.Errorf("traceparent: got %q, want the caller's trace %s", tp, traceID)
	}
	h := *w.egressHeader.Load()
	if got := h.Values(grpcraw.MethodHeader); len(got) != 1 || got[0] != "/grpc.testing.TestService/EmptyCall" {
		t.Errorf("rpr header %s: %q, want the call's method alone", grpcraw.MethodHeader, got)
	}
	if got := h.Values(tunnel.CallerHeader); len(got) != 1 || got[0] != "127.0.0.1" {
		t.Errorf("rpr header %s: %q, want the caller's address alone", tunnel.CallerHeader, got)
	}
	if h.Get(grpcraw.AuthorityHeader) == "" {
		t.Errorf("rpr header %s missing: %v", grpcraw.AuthorityHeader, h)
	}
}

// testHeaderTrailer: the upstream's header (binary values too) and
// trailer reach the caller, with the request id in the trailer.
func testHeaderTrailer(t *testing.T, tc testgrpc.TestServiceClient) {
	ctx := metadata.AppendToOutgoingContext(context.Background(), caseKey, "header")
	var header, trailer metadata.MD
	if _, err := tc.EmptyCall(ctx, &testgrpc.Empty{}, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	if got := first(header, "x-up-header"); got != "h1" {
		t.Errorf("header x-up-header: got %q in %v", got, header)
	}
	if got := first(header, "x-up-header-bin"); got != "\x00\xff" {
		t.Errorf("header x-up-header-bin: got %q", got)
	}
	if got := first(trailer, "x-up-trailer"); got != "t1" {
		t.Errorf("trailer x-up-trailer: got %q in %v", got, trailer)
	}
	if got := first(trailer, grpcraw.RequestIDKey); got == "" {
		t.Errorf("trailer %v: no %s", trailer, grpcraw.RequestIDKey)
	}
}

// testDeadline: the caller's deadline reaches the upstream; without one,
// the route's timeout (7s) is the call's. rpr carries deadlines in
// Redis's clock, in milliseconds, so the far side's may be a few
// milliseconds off.
func testDeadline(t *testing.T, w *grpcWorld, tc testgrpc.TestServiceClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := tc.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, left := w.up.last(); left <= time.Second || left > 3*time.Second+50*time.Millisecond {
		t.Errorf("upstream deadline: %v left, want a little under 3s", left)
	}
	if _, err := tc.EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, left := w.up.last(); left <= 5*time.Second || left > 7*time.Second+50*time.Millisecond {
		t.Errorf("upstream deadline without the caller's: %v left, want a little under the route's 7s", left)
	}
}

// testCancelReachesUpstream: a stream whose server speaks first (its
// caller waits for the header before sending) gets through, and a caller
// that cancels it ends the upstream handler's context.
func testCancelReachesUpstream(t *testing.T, w *grpcWorld, tc testgrpc.TestServiceClient) {
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), caseKey, "block"))
	defer cancel()
	s, err := tc.HalfDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The caller sends nothing: the server speaks first.
	h, err := s.Header()
	if err != nil || first(h, "x-blocking") != "yes" {
		t.Fatalf("Header: %v, %v: want the upstream's, which it sends once it runs", h, err)
	}
	cancel()
	select {
	case err := <-w.up.ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("upstream context ended with %v, want cancelled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream's handler still runs 5s after its caller cancelled")
	}
}
