package grpcraw_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/grpcraw"
	"github.com/rprtunnel/rpr/tunnel"
)

func TestCodec(t *testing.T) {
	var c grpcraw.Codec
	msg := []byte("\x0a\x03abc")
	for _, v := range []any{msg, &msg} {
		out, err := c.Marshal(v)
		if err != nil || string(out.Materialize()) != string(msg) {
			t.Fatalf("Marshal(%T) = %q, %v", v, out.Materialize(), err)
		}
	}
	wire := []byte("\x08\x01")
	var got []byte
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &got); err != nil {
		t.Fatal(err)
	}
	wire[0] = 0 // gRPC reuses its buffers: the message must be a copy
	if string(got) != "\x08\x01" {
		t.Fatalf("Unmarshal: %q, want a copy of the message", got)
	}
	if err := c.Unmarshal(nil, &got); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("Unmarshal of an empty message: %q, %v; want empty, not nil", got, err)
	}
	if _, err := c.Marshal("text"); err == nil {
		t.Error("Marshal of a string: no error")
	}
	if err := c.Unmarshal(nil, new(string)); err == nil {
		t.Error("Unmarshal into a *string: no error")
	}
}

// TestStatusRoundTrip: a gRPC status survives gRPC -> rpr -> gRPC with
// its code, message and details byte for byte, details of types this
// program does not link included.
func TestStatusRoundTrip(t *testing.T) {
	bad, _ := anypb.New(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "sku"}}})
	cases := []*spb.Status{
		{Code: int32(codes.NotFound), Message: "no such order"},
		{Code: int32(codes.FailedPrecondition), Message: "\t☺ 😈\r\n", Details: []*anypb.Any{
			bad,
			{TypeUrl: "type.googleapis.com/acme.shop.v1.Shortage", Value: []byte{0x0a, 0x03, 's', 'k', 'u'}},
			{TypeUrl: "type.googleapis.com/TopLevel", Value: []byte{0x08, 0x01}},
			{TypeUrl: "type.googleapis.com/acme.Empty"},
		}},
	}
	for _, want := range cases {
		err := grpcraw.Error(status.FromProto(want))
		if tunnel.CodeOf(err) != tunnel.Code(want.GetCode()) {
			t.Errorf("rpr code %v, want %v", tunnel.CodeOf(err), want.GetCode())
		}
		got := grpcraw.Status(err).Proto()
		if !proto.Equal(got, want) {
			t.Errorf("round trip:\n got %v\nwant %v", got, want)
		}
	}
	if err := grpcraw.Error(status.New(codes.OK, "")); err != nil {
		t.Errorf("Error(OK) = %v, want nil", err)
	}
}

func TestStatus(t *testing.T) {
	cases := []struct {
		err  error
		want codes.Code
	}{
		{nil, codes.OK},
		{context.Canceled, codes.Canceled},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{tunnel.Errorf(tunnel.Unavailable, "no egress"), codes.Unavailable},
		{tunnel.Errorf(tunnel.OK, "an error is never OK"), codes.Unknown},
		{fmt.Errorf("plain"), codes.Unknown},
	}
	for _, c := range cases {
		if got := grpcraw.Status(c.err).Code(); got != c.want {
			t.Errorf("Status(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestForwarded(t *testing.T) {
	for key, want := range map[string]bool{
		"x-tenant": true, "authorization": true, "user-agent": true, "x-trace-bin": true,
		"rpr-grpc-method": false, "x-rpr-caller": false, "x-rpr-request-id": false, "grpc-timeout": false, "grpc-accept-encoding": false,
		":authority": false, "content-type": false, "te": false,
		"traceparent": false, "tracestate": false, "connection": false, "": false,
	} {
		if got := grpcraw.Forwarded(key); got != want {
			t.Errorf("Forwarded(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestMetadata(t *testing.T) {
	in := metadata.MD{
		"x-id-bin":        {"\x00\xff"},
		"x-multi":         {"a", "b"},
		"content-type":    {"application/grpc"},
		"rpr-grpc-method": {"/evil.S/M"},
	}
	md := grpcraw.ToTunnel(in)
	if len(md) != 2 || md.Get("x-id-bin") != "\x00\xff" || len(md.Values("x-multi")) != 2 {
		t.Fatalf("ToTunnel: %v", md)
	}
	out, err := grpcraw.ToGRPC(md)
	if err != nil || len(out) != 2 || out.Get("x-id-bin")[0] != "\x00\xff" {
		t.Fatalf("ToGRPC: %v, %v", out, err)
	}
	for _, bad := range []tunnel.Metadata{
		{"x key": {"v"}},
		{"x-text": {"line\nbreak"}},
		{"x-text": {"\xff"}},
	} {
		if _, err := grpcraw.ToGRPC(bad); err == nil {
			t.Errorf("ToGRPC(%q): no error", bad)
		}
	}
}
