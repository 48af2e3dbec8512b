package tunnel

import (
	"context"

	"google.golang.org/protobuf/proto"
)

// UnaryInvoker sends one call and fills reply; it is the last step of a
// client interceptor chain.
type UnaryInvoker func(ctx context.Context, method *MethodDesc, req, reply proto.Message, opts ...CallOption) error

// UnaryClientInterceptor wraps outgoing calls, for logging, auth headers,
// metrics and the like. It must call invoker to send the call.
type UnaryClientInterceptor func(ctx context.Context, method *MethodDesc, req, reply proto.Message, invoker UnaryInvoker, opts ...CallOption) error

// UnaryServerInfo tells a server interceptor which method it wraps.
type UnaryServerInfo struct {
	// Server is the user's service implementation.
	Server any
	// FullMethod is "service/method".
	FullMethod string
}

// UnaryHandler runs the user's method; it is the last step of a server
// interceptor chain.
type UnaryHandler func(ctx context.Context, req proto.Message) (proto.Message, error)

// UnaryServerInterceptor wraps incoming calls. It must call handler to run
// the method.
type UnaryServerInterceptor func(ctx context.Context, req proto.Message, info *UnaryServerInfo, handler UnaryHandler) (proto.Message, error)

// chainClientInterceptors folds interceptors into one; the first is the
// outermost. It returns nil when there are none.
func chainClientInterceptors(interceptors []UnaryClientInterceptor) UnaryClientInterceptor {
	switch len(interceptors) {
	case 0:
		return nil
	case 1:
		return interceptors[0]
	}
	return func(ctx context.Context, method *MethodDesc, req, reply proto.Message, invoker UnaryInvoker, opts ...CallOption) error {
		return interceptors[0](ctx, method, req, reply, chainedInvoker(interceptors, 1, invoker), opts...)
	}
}

func chainedInvoker(interceptors []UnaryClientInterceptor, next int, final UnaryInvoker) UnaryInvoker {
	if next == len(interceptors) {
		return final
	}
	return func(ctx context.Context, method *MethodDesc, req, reply proto.Message, opts ...CallOption) error {
		return interceptors[next](ctx, method, req, reply, chainedInvoker(interceptors, next+1, final), opts...)
	}
}

// chainServerInterceptors folds interceptors into one; the first is the
// outermost. It returns nil when there are none.
func chainServerInterceptors(interceptors []UnaryServerInterceptor) UnaryServerInterceptor {
	switch len(interceptors) {
	case 0:
		return nil
	case 1:
		return interceptors[0]
	}
	return func(ctx context.Context, req proto.Message, info *UnaryServerInfo, handler UnaryHandler) (proto.Message, error) {
		return interceptors[0](ctx, req, info, chainedHandler(interceptors, 1, info, handler))
	}
}

func chainedHandler(interceptors []UnaryServerInterceptor, next int, info *UnaryServerInfo, final UnaryHandler) UnaryHandler {
	if next == len(interceptors) {
		return final
	}
	return func(ctx context.Context, req proto.Message) (proto.Message, error) {
		return interceptors[next](ctx, req, info, chainedHandler(interceptors, next+1, info, final))
	}
}

// chainStreamClientInterceptors folds stream interceptors into one; the
// first is the outermost. It returns nil when there are none.
func chainStreamClientInterceptors(interceptors []StreamClientInterceptor) StreamClientInterceptor {
	if len(interceptors) == 0 {
		return nil
	}
	return func(ctx context.Context, method *MethodDesc, streamer Streamer, opts ...CallOption) (ClientStream, error) {
		return chainedStreamer(interceptors, 0, streamer)(ctx, method, opts...)
	}
}

// chainedStreamer returns the streamer that runs interceptors[next:] and
// then final.
func chainedStreamer(interceptors []StreamClientInterceptor, next int, final Streamer) Streamer {
	if next == len(interceptors) {
		return final
	}
	return func(ctx context.Context, method *MethodDesc, opts ...CallOption) (ClientStream, error) {
		return interceptors[next](ctx, method, chainedStreamer(interceptors, next+1, final), opts...)
	}
}

// chainStreamServerInterceptors folds stream interceptors into one; the
// first is the outermost. It returns nil when there are none.
func chainStreamServerInterceptors(interceptors []StreamServerInterceptor) StreamServerInterceptor {
	if len(interceptors) == 0 {
		return nil
	}
	return func(srv any, stream ServerStream, info *StreamServerInfo, handler StreamHandler) error {
		return chainedStreamHandler(interceptors, 0, info, handler)(srv, stream)
	}
}

// chainedStreamHandler returns the handler that runs interceptors[next:]
// and then final.
func chainedStreamHandler(interceptors []StreamServerInterceptor, next int, info *StreamServerInfo, final StreamHandler) StreamHandler {
	if next == len(interceptors) {
		return final
	}
	return func(srv any, stream ServerStream) error {
		return interceptors[next](srv, stream, info, chainedStreamHandler(interceptors, next+1, info, final))
	}
}
