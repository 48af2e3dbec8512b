// Package greeter is the example implementation of the
// examples.greeter.v1.Greeter service, shared by the example server and
// `rpr demo`.
package greeter

import (
	"context"
	"errors"
	"io"
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

// maxCountdown bounds Countdown, so that one request cannot keep a stream
// open for long.
const maxCountdown = 1000

// Countdown sends req.From, req.From-1, ..., 1, req.IntervalMs apart
// (default 100ms), then ends the stream; the caller's going away ends it
// early.
func (Server) Countdown(req *greeterv1.CountdownRequest, stream tunnel.ServerStreamingServer[greeterv1.CountdownResponse]) error {
	if req.GetFrom() > maxCountdown {
		return tunnel.Errorf(tunnel.InvalidArgument, "from %d is more than %d", req.GetFrom(), maxCountdown)
	}
	interval := time.Duration(req.GetIntervalMs()) * time.Millisecond
	if interval == 0 {
		interval = 100 * time.Millisecond
	}
	for n := req.GetFrom(); n > 0; n-- {
		if err := stream.Send(&greeterv1.CountdownResponse{Count: n}); err != nil {
			return err
		}
		if n == 1 {
			break
		}
		select {
		case <-time.After(interval):
		case <-stream.Context().Done():
			return tunnel.NewError(tunnel.Canceled, context.Cause(stream.Context()))
		}
	}
	return nil
}

// Chat answers each message with a greeting, until the caller closes its
// side.
func (Server) Chat(stream tunnel.BidiStreamingServer[greeterv1.ChatRequest, greeterv1.ChatResponse]) error {
	for {
		in, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&greeterv1.ChatResponse{Text: "Hello, " + in.GetText() + "!"}); err != nil {
			return err
		}
	}
}
