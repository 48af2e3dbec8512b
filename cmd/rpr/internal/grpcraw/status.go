package grpcraw

import (
	"context"
	"errors"
	"fmt"
	"sync"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"

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
// and details (nil for OK), so that a handler returning it answers the
// rpr caller with exactly what the gRPC server said. A detail whose type
// URL is not of type.googleapis.com comes back under that prefix, with
// the same message name and bytes.
func Error(st *status.Status) error {
	if st.Code() == codes.OK {
		return nil
	}
	e := tunnel.Errorf(tunnel.Code(st.Code()), "%s", st.Message())
	details := st.Proto().GetDetails()
	if len(details) == 0 {
		return e
	}
	msgs := make([]proto.Message, 0, len(details))
	for _, a := range details {
		if m, err := asMessage(a); err == nil {
			msgs = append(msgs, m)
		}
	}
	with, err := e.WithDetails(msgs...)
	if err != nil {
		return e
	}
	return with
}

// asMessage returns a message that anypb.New (what tunnel.Error.WithDetails
// uses) turns back into a: a dynamic message of a's type name, with no
// fields known and a's bytes as its unknown fields, which marshal as they
// are. The type need not be linked into this program.
func asMessage(a *anypb.Any) (proto.Message, error) {
	name := a.MessageName()
	if !name.IsValid() {
		return nil, fmt.Errorf("grpcraw: detail type URL %q names no message", a.GetTypeUrl())
	}
	desc, err := placeholders.get(name)
	if err != nil {
		return nil, err
	}
	m := dynamicpb.NewMessage(desc)
	m.SetUnknown(a.GetValue())
	return m, nil
}

// placeholderCap bounds how many detail type names get a cached
// descriptor; names past it get a fresh one each time.
const placeholderCap = 1024

// placeholders caches an empty message descriptor per detail type name.
var placeholders = &placeholderCache{byName: map[protoreflect.FullName]protoreflect.MessageDescriptor{}}

type placeholderCache struct {
	mu     sync.Mutex
	byName map[protoreflect.FullName]protoreflect.MessageDescriptor
}

func (c *placeholderCache) get(name protoreflect.FullName) (protoreflect.MessageDescriptor, error) {
	c.mu.Lock()
	desc, ok := c.byName[name]
	c.mu.Unlock()
	if ok {
		return desc, nil
	}
	file := &descriptorpb.FileDescriptorProto{
		Name:        proto.String("rpr/passthrough/" + string(name) + ".proto"),
		Syntax:      proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String(string(name.Name()))}},
	}
	if pkg := name.Parent(); pkg != "" {
		file.Package = proto.String(string(pkg))
	}
	fd, err := protodesc.NewFile(file, new(protoregistry.Files))
	if err != nil {
		return nil, fmt.Errorf("grpcraw: detail type %s: %w", name, err)
	}
	desc = fd.Messages().Get(0)
	c.mu.Lock()
	if len(c.byName) < placeholderCap {
		c.byName[name] = desc
	}
	c.mu.Unlock()
	return desc, nil
}
