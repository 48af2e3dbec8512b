package ingress

import (
	"context"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // the codec testCodec wraps
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// testCodec is protobuf under another name: a content-subtype that the
// caller and the upstream know and the tunnel does not.
type testCodec struct{}

const testSubtype = "rprtest"

func (testCodec) Name() string { return testSubtype }

func (testCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (testCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}

func init() { encoding.RegisterCodecV2(testCodec{}) }

// caseKey picks what testUpstream's EmptyCall and HalfDuplexCall do.
const caseKey = "x-case"

// testUpstream is gRPC's interop TestService, stock, except for EmptyCall
// and HalfDuplexCall, which the interop cases do not use: they record
// what arrived and answer as the caller's x-case metadata says.
type testUpstream struct {
	testgrpc.TestServiceServer

	mu       sync.Mutex
	md       metadata.MD   // of the last EmptyCall
	deadline time.Duration // left of it when it arrived; 0: none
	ended    chan error    // HalfDuplexCall "block": why its context ended
}

func newTestUpstream() *testUpstream {
	return &testUpstream{TestServiceServer: interop.NewTestServer(), ended: make(chan error, 1)}
}

// detailsStatus is what EmptyCall answers to x-case: details: a status
// with a known detail type, a type no program here links, and a message
// gRPC must carry as it is.
func detailsStatus() *status.Status {
	bad, _ := anypb.New(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "sku", Description: "unknown"}}})
	return status.FromProto(&spb.Status{
		Code:    int32(codes.FailedPrecondition),
		Message: "order 42: stock ran out \t☺ 😈\r\n",
		Details: []*anypb.Any{
			bad,
			{TypeUrl: "type.googleapis.com/acme.shop.v1.Shortage", Value: []byte{0x0a, 0x03, 's', 'k', 'u', 0x10, 0x07}},
		},
	})
}

func (u *testUpstream) EmptyCall(ctx context.Context, in *testgrpc.Empty) (*testgrpc.Empty, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var left time.Duration
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	u.mu.Lock()
	u.md, u.deadline = md.Copy(), left
	u.mu.Unlock()
	switch first(md, caseKey) {
	case "details":
		return nil, detailsStatus().Err()
	case "header":
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-up-header", "h1", "x-up-header-bin", "\x00\xff"))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-up-trailer", "t1"))
	}
	return &testgrpc.Empty{}, nil
}

// HalfDuplexCall with x-case: block sends its header, then waits for its
// context to end and reports why.
func (u *testUpstream) HalfDuplexCall(stream testgrpc.TestService_HalfDuplexCallServer) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	if first(md, caseKey) != "block" {
		return u.TestServiceServer.HalfDuplexCall(stream)
	}
	if err := stream.SendHeader(metadata.Pairs("x-blocking", "yes")); err != nil {
		return err
	}
	<-stream.Context().Done()
	u.ended <- stream.Context().Err()
	return stream.Context().Err()
}

func (u *testUpstream) last() (metadata.MD, time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.md, u.deadline
}

func first(md metadata.MD, key string) string {
	if vs := md.Get(key); len(vs) > 0 {
		return vs[0]
	}
	return ""
}
