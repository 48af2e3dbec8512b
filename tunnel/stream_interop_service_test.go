package tunnel_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

// Streaming cases modelled on the gRPC interop suite
// (doc/interop-test-descriptions.md in grpc/grpc), against a bytes-payload
// service described by hand as generated code would describe it:
//
//	StreamingInputCall  (stream BytesValue) returns (Int64Value)
//	    the sum of the payload sizes received
//	StreamingOutputCall (Struct) returns (stream BytesValue)
//	    one reply per size in the request's "sizes"
//	FullDuplexCall      (stream Struct) returns (stream BytesValue)
//	    one reply of "size" bytes per request
//
// A Struct request may also carry "payload" (a string, the request's
// payload), "code" and "message" (the status to end with instead of
// replying; "details" adds error details), "fail_after" (StreamingOutput:
// end with that status after so many replies) and "sleep" (wait for the
// handler's context to end). Handlers echo the metadata the interop suite
// names: x-grpc-test-echo-initial to the response header (SetHeader, then
// SendHeader adding x-rpr-test-header-sent) and
// x-grpc-test-echo-trailing-bin to the trailer.
const interopService = "test.v1.StreamInterop"

var interopInfo = tunnel.ServiceInfo{Name: interopService}

type (
	interopPayload = wrapperspb.BytesValue
	interopParams  = structpb.Struct
	interopSum     = wrapperspb.Int64Value
)

// The interop suite's sizes.
var (
	interopRequestSizes  = []int{27182, 8, 1828, 45904} // aggregate 74922
	interopResponseSizes = []int{31415, 9, 2653, 58979}
)

const (
	echoInitialKey    = "x-grpc-test-echo-initial"
	echoTrailingKey   = "x-grpc-test-echo-trailing-bin"
	echoInitialValue  = "test_initial_metadata_value"
	echoTrailingValue = "\xab\xab\xab"
	headerSentKey     = "x-rpr-test-header-sent"
)

// interopRun is what the handler of one request id saw.
type interopRun struct {
	method   string
	runs     int
	header   tunnel.Metadata // the request header, from the handler's context
	received []int           // payload sizes received, in order
	ended    chan struct{}   // closed when the handler returns
	ctxErr   error           // the handler's context error when it returned
	cause    error           // and its cause
}

// interopImpl serves the interop service and records every run by request
// id.
type interopImpl struct {
	mu   sync.Mutex
	byID map[string]*interopRun
}

func newInteropImpl() *interopImpl { return &interopImpl{byID: map[string]*interopRun{}} }

// begin records the start of a handler and returns its record and the
// function to call when it returns.
func (s *interopImpl) begin(method string, stream tunnel.ServerStream) (*interopRun, func()) {
	ctx := stream.Context()
	id := tunnel.RequestIDFromContext(ctx)
	s.mu.Lock()
	r := s.byID[id]
	if r == nil {
		r = &interopRun{method: method, ended: make(chan struct{})}
		s.byID[id] = r
	}
	r.runs++
	r.header = tunnel.HeaderFromContext(ctx).Clone()
	s.mu.Unlock()
	echoMetadata(stream)
	return r, func() {
		s.mu.Lock()
		r.ctxErr, r.cause = ctx.Err(), context.Cause(ctx)
		s.mu.Unlock()
		close(r.ended)
	}
}

func (s *interopImpl) receivedSize(r *interopRun, n int) {
	s.mu.Lock()
	r.received = append(r.received, n)
	s.mu.Unlock()
}

// run returns the record of request id, nil when no handler ran it.
func (s *interopImpl) run(id string) *interopRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id]
}

// snapshot returns a copy of request id's record, safe to read.
func (s *interopImpl) snapshot(id string) interopRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.byID[id]
	if r == nil {
		return interopRun{}
	}
	out := *r
	out.received = slices.Clone(r.received)
	return out
}

// echoMetadata echoes the interop suite's metadata keys.
func echoMetadata(stream tunnel.ServerStream) {
	in := tunnel.HeaderFromContext(stream.Context())
	if v := in.Values(echoInitialKey); len(v) > 0 {
		_ = stream.SetHeader(tunnel.Metadata{echoInitialKey: v})
		_ = stream.SendHeader(tunnel.Metadata{headerSentKey: {"yes"}})
	}
	if v := in.Values(echoTrailingKey); len(v) > 0 {
		stream.SetTrailer(tunnel.Metadata{echoTrailingKey: v})
	}
}

func field(p *interopParams, name string) *structpb.Value { return p.GetFields()[name] }

// statusOf returns the status a request asks for, nil when none.
func statusOf(p *interopParams) error {
	code := field(p, "code")
	if code == nil {
		return nil
	}
	err := tunnel.Errorf(tunnel.Code(code.GetNumberValue()), "%s", field(p, "message").GetStringValue())
	if field(p, "details").GetBoolValue() {
		withDetails, derr := err.WithDetails(
			&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "size", Description: "too ☺ big"}}},
			&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)})
		if derr != nil {
			return derr
		}
		return withDetails
	}
	return err
}

func (s *interopImpl) streamingInput(stream tunnel.ClientStreamingServer[interopPayload, interopSum]) error {
	r, end := s.begin("StreamingInputCall", stream)
	defer end()
	var sum int64
	for {
		in, err := stream.Recv()
		if isEOF(err) {
			return stream.SendAndClose(wrapperspb.Int64(sum))
		}
		if err != nil {
			return err
		}
		s.receivedSize(r, len(in.GetValue()))
		sum += int64(len(in.GetValue()))
	}
}

func (s *interopImpl) streamingOutput(in *interopParams, stream tunnel.ServerStreamingServer[interopPayload]) error {
	_, end := s.begin("StreamingOutputCall", stream)
	defer end()
	failAfter := -1
	if v := field(in, "fail_after"); v != nil {
		failAfter = int(v.GetNumberValue())
	}
	for i, size := range field(in, "sizes").GetListValue().GetValues() {
		if i == failAfter {
			return statusOf(in)
		}
		if err := stream.Send(wrapperspb.Bytes(make([]byte, int(size.GetNumberValue())))); err != nil {
			return err
		}
	}
	if field(in, "sleep").GetBoolValue() {
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	if failAfter < 0 {
		return statusOf(in)
	}
	return nil
}

func (s *interopImpl) fullDuplex(stream tunnel.BidiStreamingServer[interopParams, interopPayload]) error {
	r, end := s.begin("FullDuplexCall", stream)
	defer end()
	for {
		in, err := stream.Recv()
		if isEOF(err) {
			return nil
		}
		if err != nil {
			return err
		}
		s.receivedSize(r, len(field(in, "payload").GetStringValue()))
		if err := statusOf(in); err != nil {
			return err
		}
		if field(in, "sleep").GetBoolValue() {
			<-stream.Context().Done()
			return stream.Context().Err()
		}
		if err := stream.Send(wrapperspb.Bytes(make([]byte, int(field(in, "size").GetNumberValue())))); err != nil {
			return err
		}
	}
}

var interopDesc = tunnel.ServiceDesc{
	Service: &interopInfo,
	Methods: []tunnel.MethodDesc{
		{Service: &interopInfo, Name: "StreamingInputCall", ClientStreams: true, StreamHandler: func(impl any, s tunnel.ServerStream) error {
			return impl.(*interopImpl).streamingInput(&tunnel.GenericServerStream[interopPayload, interopSum]{ServerStream: s})
		}},
		{Service: &interopInfo, Name: "StreamingOutputCall", ServerStreams: true, StreamHandler: func(impl any, s tunnel.ServerStream) error {
			in := new(interopParams)
			if err := s.RecvMsg(in); err != nil {
				return err
			}
			return impl.(*interopImpl).streamingOutput(in, &tunnel.GenericServerStream[interopParams, interopPayload]{ServerStream: s})
		}},
		{Service: &interopInfo, Name: "FullDuplexCall", ClientStreams: true, ServerStreams: true, StreamHandler: func(impl any, s tunnel.ServerStream) error {
			return impl.(*interopImpl).fullDuplex(&tunnel.GenericServerStream[interopParams, interopPayload]{ServerStream: s})
		}},
	},
}

func interopMethod(name string) *tunnel.MethodDesc {
	for i := range interopDesc.Methods {
		if interopDesc.Methods[i].Name == name {
			return &interopDesc.Methods[i]
		}
	}
	panic(name)
}

// interopEnv is a Redis, one server of the interop service and a client.
type interopEnv struct {
	*streamWorld
	impl   *interopImpl
	client *tunnel.Client
}

func newInteropEnv(t *testing.T, server tunnel.ServerOptions, client tunnel.ClientOptions) *interopEnv {
	t.Helper()
	e := &interopEnv{streamWorld: newStreamWorld(t), impl: newInteropImpl()}
	e.serve(nil, server, func(s *tunnel.Server) { s.RegisterService(&interopDesc, e.impl) })
	e.client = e.streamWorld.client(nil, client)
	waitFor(t, "the interop server to take streams", func() bool {
		s, err := e.output(context.Background(), params(map[string]any{"sizes": []any{}}))
		if err != nil {
			return false
		}
		_, err = s.Recv()
		return isEOF(err)
	})
	return e
}

func params(m map[string]any) *interopParams {
	p, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return p
}

// input opens StreamingInputCall.
func (e *interopEnv) input(ctx context.Context, opts ...tunnel.CallOption) (tunnel.ClientStreamingClient[interopPayload, interopSum], error) {
	s, err := e.client.NewStream(ctx, interopMethod("StreamingInputCall"), opts...)
	if err != nil {
		return nil, err
	}
	return &tunnel.GenericClientStream[interopPayload, interopSum]{ClientStream: s}, nil
}

// output opens StreamingOutputCall with request in.
func (e *interopEnv) output(ctx context.Context, in *interopParams, opts ...tunnel.CallOption) (tunnel.ServerStreamingClient[interopPayload], error) {
	s, err := e.client.NewStream(ctx, interopMethod("StreamingOutputCall"), opts...)
	if err != nil {
		return nil, err
	}
	x := &tunnel.GenericClientStream[interopParams, interopPayload]{ClientStream: s}
	if err := x.SendMsg(in); err != nil {
		return nil, err
	}
	if err := x.CloseSend(); err != nil {
		return nil, err
	}
	return x, nil
}

// duplex opens FullDuplexCall.
func (e *interopEnv) duplex(ctx context.Context, opts ...tunnel.CallOption) (tunnel.BidiStreamingClient[interopParams, interopPayload], error) {
	s, err := e.client.NewStream(ctx, interopMethod("FullDuplexCall"), opts...)
	if err != nil {
		return nil, err
	}
	return &tunnel.GenericClientStream[interopParams, interopPayload]{ClientStream: s}, nil
}

// ended waits for request id's handler to return.
func (e *interopEnv) ended(t *testing.T, id string) interopRun {
	t.Helper()
	waitFor(t, "a handler to run "+id, func() bool { return e.impl.run(id) != nil })
	if _, ok := within(e.impl.run(id).ended, 20*time.Second); !ok {
		t.Fatalf("the handler of %s did not return within 20s", id)
	}
	return e.impl.snapshot(id)
}

func sizesOf(n []int) []any {
	out := make([]any, len(n))
	for i, v := range n {
		out[i] = v
	}
	return out
}
