// Package greeter is the example implementation of the
// examples.greeter.v1.Greeter service, shared by the example server and
// `rpr demo`.
package greeter

import (
	"context"
	"time"

	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

// Server implements greeterv1.GreeterServer.
type Server struct {
	greeterv1.UnimplementedGreeterServer
}

// SayHello greets req.Name, refusing an empty name with INVALID_ARGUMENT.
func (Server) SayHello(ctx context.Context, req *greeterv1.SayHelloRequest) (*greeterv1.SayHelloResponse, error) {
	if req.GetName() == "" {
		return nil, tunnel.Errorf(tunnel.InvalidArgument, "name is empty: say who to greet")
	}
	return &greeterv1.SayHelloResponse{Message: "Hello, " + req.GetName() + "!"}, nil
}

// SlowHello waits req.DelayMs before greeting, or until the call's
// deadline, whichever comes first.
func (s Server) SlowHello(ctx context.Context, req *greeterv1.SlowHelloRequest) (*greeterv1.SlowHelloResponse, error) {
	select {
	case <-time.After(time.Duration(req.GetDelayMs()) * time.Millisecond):
	case <-ctx.Done():
		return nil, tunnel.NewError(tunnel.DeadlineExceeded, context.Cause(ctx))
	}
	return &greeterv1.SlowHelloResponse{Message: "Hello, " + req.GetName() + ", eventually!"}, nil
}
