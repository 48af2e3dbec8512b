package tunnel

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"
)

// SupportPackageIsVersion1 is referenced by code generated with
// protoc-gen-rpr. Generated code that needs a newer runtime refers to a
// constant this package does not have yet, so a mismatch fails at compile
// time instead of misbehaving at run time.
const SupportPackageIsVersion1 = true

// MethodHandler runs one method of a registered service: it decodes the
// request with decode, calls the user's implementation through the
// interceptor (when there is one) and returns the reply. Generated code
// provides one per method.
type MethodHandler func(impl any, ctx context.Context, decode func(proto.Message) error, interceptor UnaryServerInterceptor) (proto.Message, error)

// MethodDesc describes one method of a service. Generated code fills it in
// from the .proto file and its rpr options; users rarely build one by hand.
type MethodDesc struct {
	// Service is the fully qualified service name, e.g. "greeter.v1.Greeter".
	Service string
	// Name is the method's short name, e.g. "SayHello".
	Name string
	// Timeout is the default deadline from the (rpr.v1.method) or
	// (rpr.v1.service) option, used when the caller's context has none.
	// Zero means the client's default.
	Timeout time.Duration
	// Idempotent is true when the method's idempotency_level is IDEMPOTENT
	// or NO_SIDE_EFFECTS.
	Idempotent bool
	// Retry is the method's default retry policy from its
	// (rpr.v1.method).retry option; nil means no retries unless a call
	// asks with WithRetry.
	Retry *RetryPolicy
	// BizCode is the service's (rpr.v1.service).biz_code, placed in request
	// ids. Empty means the client's code.
	BizCode string
	// Async marks a fire-and-forget method ((rpr.v1.method).async): callers
	// use Client.Enqueue, which returns a Receipt once the request is
	// durably in Redis, and the handler's reply is discarded. Failed async
	// requests are retried by the servers under Retry (see
	// DefaultAsyncRetryPolicy) and then dead-lettered.
	Async bool
	// MaxBacklog is the service's (rpr.v1.service).max_backlog: how many
	// requests may wait in its queue (stream plus retry set) before calls
	// are refused. Zero means the client's default
	// (ClientOptions.MaxBacklog).
	MaxBacklog int64
	// Shards is the service's (rpr.v1.service).shards: how many hash tags
	// its queues are spread over, so that a Redis Cluster spreads them over
	// its masters. Zero means the Shards options, else one.
	Shards int
	// Handler runs the method on the server.
	Handler MethodHandler
}

// FullMethod returns "service/method", the name used in envelopes, logs,
// errors and the CLI, e.g. "greeter.v1.Greeter/SayHello".
func (m *MethodDesc) FullMethod() string { return m.Service + "/" + m.Name }

// ServiceDesc describes a service for registration with a Server. Generated
// code exports one per service (e.g. greeterv1.Greeter_ServiceDesc).
type ServiceDesc struct {
	// ServiceName is the fully qualified service name.
	ServiceName string
	// HandlerType is a pointer to the server interface; Register checks
	// that the implementation satisfies it.
	HandlerType any
	// Methods lists the service's methods.
	Methods []MethodDesc
	// Metadata is the path of the .proto file that defines the service.
	Metadata string
}

// ServiceRegistrar is what generated Register functions register with; a
// *Server is one.
type ServiceRegistrar interface {
	RegisterService(desc *ServiceDesc, impl any)
}
