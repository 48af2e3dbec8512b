package ingress

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/egress"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/grpcraw"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
)

// testNoRoute: a method no route of the ingress takes is UNIMPLEMENTED,
// with the fix.
func testNoRoute(t *testing.T, cc *grpc.ClientConn) {
	err := cc.Invoke(context.Background(), "/nowhere.Service/Call", []byte{}, new([]byte), grpc.ForceCodecV2(grpcraw.Codec{}))
	st := status.Convert(err)
	if st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), "no rpr upstream route for /nowhere.Service/Call") || !strings.Contains(st.Message(), "rpr upstreams set") {
		t.Fatalf("got %v, want UNIMPLEMENTED naming the method and the fix", err)
	}
}

// testEgressNoRoute: a method the egress's table does not take (the
// tables disagree) is NOT_FOUND, not executed.
func testEgressNoRoute(t *testing.T, cc *grpc.ClientConn) {
	var trailer metadata.MD
	err := cc.Invoke(context.Background(), "/egressless.Service/Call", []byte{}, new([]byte), grpc.ForceCodecV2(grpcraw.Codec{}), grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.NotFound || !strings.Contains(st.Message(), "no upstream route") {
		t.Fatalf("got %v, want the egress's NOT_FOUND", err)
	}
	if info := errorInfo(st); info.GetReason() != egress.ReasonNoRoute {
		t.Errorf("ErrorInfo %v, want reason %s", info, egress.ReasonNoRoute)
	}
	if got := first(trailer, grpcraw.OutcomeKey); got != OutcomeNotExecuted {
		t.Errorf("outcome %q, want %q", got, OutcomeNotExecuted)
	}
}

// testUpstreamDown: an upstream that refuses connections is UNAVAILABLE,
// the call not sent, for a unary and a streaming call.
func testUpstreamDown(t *testing.T, cc *grpc.ClientConn) {
	var trailer metadata.MD
	err := cc.Invoke(context.Background(), "/down.Service/Call", []byte{}, new([]byte), grpc.ForceCodecV2(grpcraw.Codec{}), grpc.Trailer(&trailer))
	checkDown(t, err)
	if got := first(trailer, grpcraw.OutcomeKey); got != OutcomeNotExecuted {
		t.Errorf("outcome %q, want %q", got, OutcomeNotExecuted)
	}
	s, err := cc.NewStream(context.Background(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/down.Service/Chat", grpc.ForceCodecV2(grpcraw.Codec{}))
	if err != nil {
		t.Fatal(err)
	}
	_ = s.SendMsg([]byte("one"))
	_ = s.SendMsg([]byte("two"))
	checkDown(t, s.RecvMsg(new([]byte)))
}

// testNoEgress: a route whose lane no egress serves fails UNAVAILABLE,
// not executed, with rpr's message.
func testNoEgress(t *testing.T, cc *grpc.ClientConn) {
	var trailer metadata.MD
	err := cc.Invoke(context.Background(), "/laneless.Service/Call", []byte{}, new([]byte), grpc.ForceCodecV2(grpcraw.Codec{}), grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "nowhere") {
		t.Fatalf("got %v, want UNAVAILABLE naming lane nowhere", err)
	}
	if got := first(trailer, grpcraw.OutcomeKey); got != OutcomeNotExecuted {
		t.Errorf("outcome %q, want %q", got, OutcomeNotExecuted)
	}
}

// testContentSubtype: a caller's content-subtype (its codec) reaches the
// upstream, which decodes the messages with it.
func testContentSubtype(t *testing.T, w *grpcWorld, tc testgrpc.TestServiceClient) {
	if _, err := tc.EmptyCall(context.Background(), &testgrpc.Empty{}, grpc.CallContentSubtype(testSubtype)); err != nil {
		t.Fatal(err)
	}
	md, _ := w.up.last()
	if got := first(md, "content-type"); got != "application/grpc+"+testSubtype {
		t.Errorf("upstream content-type %q, want the caller's subtype %s", got, testSubtype)
	}
}

// testMessageLimit: a message over its route's limit ends the call
// RESOURCE_EXHAUSTED, naming the route and the fix: as the first message
// (nothing is sent) and later in a stream.
func testMessageLimit(t *testing.T, w *grpcWorld) {
	tc := testgrpc.NewTestServiceClient(w.small)
	big := &testgrpc.Payload{Body: make([]byte, 2048)}
	check := func(what string, err error) {
		t.Helper()
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "route small") || !strings.Contains(st.Message(), "--max-body") {
			t.Errorf("%s: got %v, want RESOURCE_EXHAUSTED naming route small and --max-body", what, err)
		}
	}
	_, err := tc.UnaryCall(context.Background(), &testgrpc.SimpleRequest{Payload: big})
	check("unary", err)

	s, err := tc.FullDuplexCall(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&testgrpc.StreamingOutputCallRequest{ResponseParameters: []*testgrpc.ResponseParameters{{Size: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&testgrpc.StreamingOutputCallRequest{Payload: big})
	_, err = s.Recv()
	check("stream", err)
	checkNoRelays(t)
}

func checkDown(t *testing.T, err error) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "not sent") {
		t.Fatalf("got %v, want UNAVAILABLE, not sent", err)
	}
	if info := errorInfo(st); info.GetReason() != egress.ReasonUpstream || info.GetMetadata()["sent"] != "false" {
		t.Errorf("ErrorInfo %v, want %s, sent false", info, egress.ReasonUpstream)
	}
}

func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// testReflection: server reflection, grpcurl's way to learn a schema,
// works through the tunnel (a bidirectional stream of requests).
func testReflection(t *testing.T, cc *grpc.ClientConn) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(req *reflectionpb.ServerReflectionRequest) *reflectionpb.ServerReflectionResponse {
		t.Helper()
		if err := s.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	list := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	var names []string
	for _, svc := range list.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), "grpc.testing.TestService") {
		t.Fatalf("list services: %v, want grpc.testing.TestService", names)
	}
	files := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "grpc.testing.TestService"}})
	raw := files.GetFileDescriptorResponse().GetFileDescriptorProto()
	found := false
	for _, b := range raw {
		fd := new(descriptorpb.FileDescriptorProto)
		if err := proto.Unmarshal(b, fd); err != nil {
			t.Fatal(err)
		}
		for _, svc := range fd.GetService() {
			found = found || fd.GetPackage()+"."+svc.GetName() == "grpc.testing.TestService"
		}
	}
	if !found {
		t.Fatalf("file containing grpc.testing.TestService: %d files, none defines it", len(raw))
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want io.EOF", err)
	}
}

// testLoop: a call whose route leads back to the ingress is forwarded
// until it has crossed upstream.MaxHops tunnels, then refused
// FAILED_PRECONDITION naming the loop (the status of an upstream, the
// last ingress, as the caller sees it); one that says it crossed them
// already is refused at once, not executed.
func testLoop(t *testing.T, cc *grpc.ClientConn) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := cc.Invoke(ctx, "/loop.Service/Call", []byte{}, new([]byte), grpc.ForceCodecV2(grpcraw.Codec{}))
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "forwarding loop") {
		t.Fatalf("a call routed back to its ingress: %v; want FAILED_PRECONDITION naming the loop", err)
	}
	var trailer metadata.MD
	crossed := metadata.AppendToOutgoingContext(ctx, grpcraw.HopsKey, strconv.Itoa(upstream.MaxHops))
	err = cc.Invoke(crossed, "/grpc.testing.TestService/EmptyCall", []byte{}, new([]byte), grpc.ForceCodecV2(grpcraw.Codec{}), grpc.Trailer(&trailer))
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), strconv.Itoa(upstream.MaxHops)+" times") {
		t.Errorf("a call that crossed %d tunnels already: %v; want FAILED_PRECONDITION at once", upstream.MaxHops, err)
	}
	if got := first(trailer, grpcraw.OutcomeKey); got != OutcomeNotExecuted {
		t.Errorf("outcome %q, want %q", got, OutcomeNotExecuted)
	}
}
