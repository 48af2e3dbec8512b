package grpcraw

import (
	"context"
	"errors"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rprtunnel/rpr/tunnel"
)

// Status returns an rpr call's outcome as a gRPC status with the same
// code, message and details: nil is OK, a context error is CANCELLED or
// DEADLINE_EXCEEDED, an *tunnel.Error is itself (rpr and gRPC share
// code numbers).
func Status(err error) *status.Status {
	if err == nil {
		return nil
	}
	var e *tunnel.Error
	if !errors.As(err, &e) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return status.FromContextError(err)
	}
	e, _ = tunnel.AsError(err)
	code := e.Code()
	if code == tunnel.OK { // an error is never OK
		code = tunnel.Unknown
	}
	return status.FromProto(&spb.Status{Code: int32(code), Message: e.Message(), Details: e.Details()})
}

// Error returns a gRPC status as an rpr error with the same code, message
// and details, type URLs and bytes unchanged (nil for OK), so that a
// handler returning it answers the rpr caller with exactly what the gRPC
// server said.
func Error(st *status.Status) error {
	if st.Code() == codes.OK {
		return nil
	}
	e := tunnel.Errorf(tunnel.Code(st.Code()), "%s", st.Message())
	details := st.Proto().GetDetails()
	if len(details) == 0 {
		return e
	}
	msgs := make([]proto.Message, len(details))
	for i, a := range details {
		msgs[i] = a
	}
	with, err := e.WithDetails(msgs...)
	if err != nil {
		return e
	}
	return with
}
