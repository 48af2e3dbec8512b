package tunnel

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"
)

// SupportPackageIsVersion4 is referenced by code generated with
// protoc-gen-rpr for version 4 of the contract between generated code and
// this package, which adds ServiceDesc.SourceInfo (the .proto comments
// servers publish with the schema). Generated code written for a version
// this package does not support names a constant it does not have, so a
// mismatch fails at compile time, on a line whose comment says to
// regenerate, instead of misbehaving at run time.
const SupportPackageIsVersion4 = true

// SupportPackageIsVersion3 is referenced by code generated for version 3
// of the contract, which added streaming methods (ClientConn.NewStream,
// MethodDesc.StreamHandler, the typed stream interfaces); this package
// still supports it: version 4 only added to it.
const SupportPackageIsVersion3 = true

// SupportPackageIsVersion2 is referenced by code generated for version 2
// of the contract (ClientConn, ServiceInfo, ServiceDesc.File), which this
// package still supports: version 3 only added to it.
const SupportPackageIsVersion2 = true

// ClientConn is what generated clients send their calls through. *Client
// implements it; a test can pass a fake, and a program can pass a wrapper
// that records, routes or rewrites calls before handing them on.
type ClientConn interface {
	// Invoke sends one unary call and waits for its answer, filling reply
	// (see Client.Invoke).
	Invoke(ctx context.Context, method *MethodDesc, req, reply proto.Message, opts ...CallOption) error
	// Enqueue sends one async request and returns its receipt once the
	// request is durably queued (see Client.Enqueue).
	Enqueue(ctx context.Context, method *MethodDesc, req proto.Message, opts ...CallOption) (Receipt, error)
	// NewStream starts a streaming call (see Client.NewStream).
	NewStream(ctx context.Context, method *MethodDesc, opts ...CallOption) (ClientStream, error)
}

var _ ClientConn = (*Client)(nil)

// MethodHandler runs one method of a registered service: it decodes the
// request with decode, calls the user's implementation through the
// interceptor (when there is one) and returns the reply. Generated code
// provides one per method.
type MethodHandler func(impl any, ctx context.Context, decode func(proto.Message) error, interceptor UnaryServerInterceptor) (proto.Message, error)

// ServiceInfo is what a service's .proto file says about the service as a
// whole. Generated code declares one per service (e.g.
// greeterv1.Greeter_ServiceInfo), and every MethodDesc of the service
// points to it.
type ServiceInfo struct {
	// Name is the fully qualified service name, e.g. "greeter.v1.Greeter".
	Name string
	// BizCode is the service's (rpr.v1.service).biz_code, placed in
	// request ids. Empty means ClientOptions.BizCode, else a code derived
	// from Name.
	BizCode string
	// MaxBacklog is the service's (rpr.v1.service).max_backlog: how many
	// requests may wait in its queue (stream plus retry set) before calls
	// are refused. Zero means ClientOptions.MaxBacklog.
	MaxBacklog int64
	// Shards is the service's (rpr.v1.service).shards: how many hash tags
	// its queues are spread over, so that a Redis Cluster spreads them over
	// its masters. Zero means the Shards options, else one.
	Shards int
}

// MethodDesc describes one method of a service. Generated code fills it in
// from the .proto file and its rpr options; MethodDescFor builds one from
// a descriptor.
type MethodDesc struct {
	// Service is the service the method belongs to.
	Service *ServiceInfo
	// Name is the method's short name, e.g. "SayHello".
	Name string
	// Timeout is the default deadline from the (rpr.v1.method) or
	// (rpr.v1.service) option, used when the caller's context has none.
	// Zero means ClientOptions.DefaultTimeout.
	Timeout time.Duration
	// Idempotent is true when the method's idempotency_level is IDEMPOTENT
	// or NO_SIDE_EFFECTS.
	Idempotent bool
	// Retry is the method's default retry policy from its
	// (rpr.v1.method).retry option; nil means no retries unless a call
	// asks with WithRetry.
	Retry *RetryPolicy
	// Async marks a fire-and-forget method ((rpr.v1.method).async): callers
	// use Client.Enqueue, which returns a Receipt once the request is
	// durably in Redis, and the handler's reply is discarded. Failed async
	// requests are retried by the servers under Retry (see
	// DefaultAsyncRetryPolicy) and then dead-lettered.
	Async bool
	// ClientStreams and ServerStreams mark a streaming method: the caller
	// sends a stream of requests, the server a stream of replies, or both
	// (bidirectional). Callers use Client.NewStream.
	ClientStreams bool
	ServerStreams bool
	// Handler runs a unary or async method on the server.
	Handler MethodHandler
	// StreamHandler runs a streaming method on the server.
	StreamHandler StreamHandler
}

// IsStreaming reports whether either side of the method streams.
func (m *MethodDesc) IsStreaming() bool { return m.ClientStreams || m.ServerStreams }

// FullMethod returns "service/method", the name used in envelopes, logs,
// errors and the CLI, e.g. "greeter.v1.Greeter/SayHello".
func (m *MethodDesc) FullMethod() string { return m.Service.Name + "/" + m.Name }

// ServiceDesc describes a service for registration with a Server. Generated
// code exports one per service (e.g. greeterv1.Greeter_ServiceDesc).
type ServiceDesc struct {
	// Service is the service's ServiceInfo, the one its Methods point to.
	Service *ServiceInfo
	// HandlerType is a pointer to the server interface; RegisterService
	// checks that the implementation satisfies it.
	HandlerType any
	// Methods lists the service's methods.
	Methods []MethodDesc
	// File is the path of the .proto file that defines the service, as
	// protoc names it (e.g. "greeter/v1/greeter.proto").
	File string
	// SourceInfo is the wire encoding of a google.protobuf.SourceCodeInfo
	// holding the comments of File's services, methods, messages, fields
	// and enums, which protoc-gen-go leaves out of the descriptor it
	// registers. Server adds it to the schema it publishes, so that rpr
	// describe shows the comments. Empty when File has none.
	SourceInfo string
}

// ServiceRegistrar is what generated Register functions register with; a
// *Server is one.
type ServiceRegistrar interface {
	RegisterService(desc *ServiceDesc, impl any)
}
