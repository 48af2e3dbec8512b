package tunnel

import (
	"context"
	"errors"
	"io"

	"google.golang.org/protobuf/proto"
)

// ClientStream is the caller's side of one streaming call, as
// ClientConn.NewStream returns it. Generated code wraps it in a typed
// stream (ServerStreamingClient, ClientStreamingClient,
// BidiStreamingClient). Like a gRPC stream, one goroutine may send while
// another receives, but two goroutines may not both send (or both
// receive) at once.
type ClientStream interface {
	// Context returns the stream's context: it ends when the stream does.
	Context() context.Context
	// Header waits for the server's response header and returns it.
	Header() (Metadata, error)
	// Trailer returns the server's trailer once RecvMsg has returned an
	// error (io.EOF included); before that it is nil.
	Trailer() Metadata
	// SendMsg sends m. It blocks while the server is a whole flow-control
	// window behind (see ClientOptions.StreamWindow), until the stream's
	// context ends. It returns io.EOF when the stream ended; RecvMsg then
	// says why.
	SendMsg(m proto.Message) error
	// CloseSend tells the server that no more messages come. It does not
	// wait for the server.
	CloseSend() error
	// RecvMsg waits for the next message and fills m. It returns io.EOF
	// when the server ended the stream with OK, and the stream's status
	// (an *Error) otherwise.
	RecvMsg(m proto.Message) error
}

// ServerStream is a handler's side of one streaming call. Generated code
// wraps it in a typed stream (ServerStreamingServer, ClientStreamingServer,
// BidiStreamingServer).
type ServerStream interface {
	// Context returns the handler's context, with the call's deadline; it
	// ends when the caller cancels or goes away.
	Context() context.Context
	// SetHeader adds md to the response header, sent with the first
	// message, with SendHeader, or when the handler returns.
	SetHeader(md Metadata) error
	// SendHeader sends the response header now, with md added.
	SendHeader(md Metadata) error
	// SetTrailer adds md to the trailer sent with the status.
	SetTrailer(md Metadata)
	// SendMsg sends m to the caller. It blocks while the caller is a whole
	// flow-control window behind (ServerOptions.StreamWindow).
	SendMsg(m proto.Message) error
	// RecvMsg waits for the caller's next message and fills m; io.EOF
	// once the caller has closed its side.
	RecvMsg(m proto.Message) error
}

// StreamHandler runs one streaming method of a registered service with
// impl, the service's implementation. Generated code provides one per
// streaming method; it is also the last step of a stream server
// interceptor chain.
type StreamHandler func(impl any, stream ServerStream) error

// ServerStreamingClient is the caller's side of a server-streaming call:
// the request went with the call, and Recv returns the replies, io.EOF
// after the last one.
type ServerStreamingClient[Res any] interface {
	Recv() (*Res, error)
	ClientStream
}

// ClientStreamingClient is the caller's side of a client-streaming call:
// Send the requests, then CloseAndRecv for the one reply.
type ClientStreamingClient[Req, Res any] interface {
	Send(*Req) error
	CloseAndRecv() (*Res, error)
	ClientStream
}

// BidiStreamingClient is the caller's side of a bidirectional call.
type BidiStreamingClient[Req, Res any] interface {
	Send(*Req) error
	Recv() (*Res, error)
	ClientStream
}

// ServerStreamingServer is a handler's side of a server-streaming call.
type ServerStreamingServer[Res any] interface {
	Send(*Res) error
	ServerStream
}

// ClientStreamingServer is a handler's side of a client-streaming call:
// Recv the requests (io.EOF after the last one), then SendAndClose the
// reply.
type ClientStreamingServer[Req, Res any] interface {
	Recv() (*Req, error)
	SendAndClose(*Res) error
	ServerStream
}

// BidiStreamingServer is a handler's side of a bidirectional call.
type BidiStreamingServer[Req, Res any] interface {
	Recv() (*Req, error)
	Send(*Res) error
	ServerStream
}

// GenericClientStream gives a ClientStream typed methods; generated code
// returns one as a ServerStreamingClient, ClientStreamingClient or
// BidiStreamingClient. Req and Res are generated message types.
type GenericClientStream[Req, Res any] struct {
	ClientStream
}

// Send sends m.
func (x *GenericClientStream[Req, Res]) Send(m *Req) error {
	return x.ClientStream.SendMsg(any(m).(proto.Message))
}

// Recv returns the next reply; io.EOF after the last one.
func (x *GenericClientStream[Req, Res]) Recv() (*Res, error) {
	m := new(Res)
	if err := x.ClientStream.RecvMsg(any(m).(proto.Message)); err != nil {
		return nil, err
	}
	return m, nil
}

// CloseAndRecv closes the sending side and returns the one reply of a
// client-streaming call.
func (x *GenericClientStream[Req, Res]) CloseAndRecv() (*Res, error) {
	if err := x.ClientStream.CloseSend(); err != nil {
		return nil, err
	}
	m, err := x.Recv()
	if errors.Is(err, io.EOF) {
		return nil, Errorf(Internal, "the server ended a client-streaming call without a reply")
	}
	return m, err
}

// GenericServerStream gives a ServerStream typed methods; generated
// handlers pass one as a ServerStreamingServer, ClientStreamingServer or
// BidiStreamingServer.
type GenericServerStream[Req, Res any] struct {
	ServerStream
}

// Send sends m.
func (x *GenericServerStream[Req, Res]) Send(m *Res) error {
	return x.ServerStream.SendMsg(any(m).(proto.Message))
}

// Recv returns the caller's next message; io.EOF after the last one.
func (x *GenericServerStream[Req, Res]) Recv() (*Req, error) {
	m := new(Req)
	if err := x.ServerStream.RecvMsg(any(m).(proto.Message)); err != nil {
		return nil, err
	}
	return m, nil
}

// SendAndClose sends the one reply of a client-streaming call; the handler
// then returns nil.
func (x *GenericServerStream[Req, Res]) SendAndClose(m *Res) error {
	return x.ServerStream.SendMsg(any(m).(proto.Message))
}

// Streamer opens a stream; it is the last step of a client stream
// interceptor chain.
type Streamer func(ctx context.Context, method *MethodDesc, opts ...CallOption) (ClientStream, error)

// StreamClientInterceptor wraps the opening of streaming calls; it may wrap
// the ClientStream it returns to see every message. It must call streamer
// to open the stream.
type StreamClientInterceptor func(ctx context.Context, method *MethodDesc, streamer Streamer, opts ...CallOption) (ClientStream, error)

// StreamServerInfo tells a stream server interceptor which method it
// wraps.
type StreamServerInfo struct {
	// Server is the user's service implementation.
	Server any
	// FullMethod is "service/method".
	FullMethod string
	// IsClientStream and IsServerStream say which sides stream.
	IsClientStream bool
	IsServerStream bool
}

// StreamServerInterceptor wraps incoming streaming calls; it may wrap the
// ServerStream to see every message. It must call handler to run the
// method.
type StreamServerInterceptor func(srv any, stream ServerStream, info *StreamServerInfo, handler StreamHandler) error
