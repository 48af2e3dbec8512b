package grpcraw

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// Codec is a gRPC codec (encoding.CodecV2) that does not encode at all: a
// message is the bytes on the wire. Marshal takes a []byte or *[]byte;
// Unmarshal fills a *[]byte with a copy of the message (gRPC frees its
// buffers once Unmarshal returns). Install it with
// grpc.ForceServerCodecV2 or grpc.ForceCodecV2, never with
// encoding.RegisterCodecV2: it would replace the proto codec of the whole
// process.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// Name is "proto": a forwarded call keeps the caller's content-subtype
// (the egress sets it with grpc.CallContentSubtype), and one that named
// none is what it was, protobuf.
func (Codec) Name() string { return "proto" }

// Marshal returns the message bytes in v, without copying them.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case []byte:
		return mem.BufferSlice{mem.SliceBuffer(m)}, nil
	case *[]byte:
		return mem.BufferSlice{mem.SliceBuffer(*m)}, nil
	}
	return nil, fmt.Errorf("grpcraw: cannot send a %T: the raw codec sends []byte (an encoded message)", v)
}

// Unmarshal copies the message into v, a *[]byte.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("grpcraw: cannot receive into a %T: the raw codec receives into *[]byte", v)
	}
	*p = data.Materialize()
	if *p == nil {
		*p = []byte{}
	}
	return nil
}
