package tunnel_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// A unary handler's context carries its request's values and behaves as a
// context.WithValue of its deadline would, for itself and for contexts
// the handler derives from it: the deadline passes as DeadlineExceeded,
// and the request id reads through a child.
func TestHandlerContextThroughChildren(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	quiet := slog.New(slog.DiscardHandler)
	type seen struct {
		err, childErr, childCause error
		hasDeadline               bool
		id                        string
	}
	got := make(chan seen, 1)
	startServer(t, rdb, tunnel.ServerOptions{Logger: quiet}, func(s *tunnel.Server) {
		s.RegisterService(&echoDesc, map[string]echoHandler{"Echo": func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			if in.GetValue() == "warm" {
				return in, nil // waitAnswered's
			}
			child, cancel := context.WithCancel(ctx)
			defer cancel()
			<-child.Done()
			_, hasDeadline := child.Deadline()
			got <- seen{err: ctx.Err(), childErr: child.Err(), childCause: context.Cause(child), hasDeadline: hasDeadline, id: tunnel.RequestIDFromContext(child)}
			// An answer now could still beat the caller's own deadline by
			// the skew between the two clocks (Redis time, read on each
			// side): the handler reports its context's end instead.
			return nil, ctx.Err()
		}})
	})
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	waitAnswered(t, client, method("Echo"))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := client.Invoke(ctx, method("Echo"), wrapperspb.String("slow"), new(wrapperspb.StringValue)); tunnel.CodeOf(err) != tunnel.DeadlineExceeded {
		t.Fatalf("call: %v; want DEADLINE_EXCEEDED", err)
	}
	select {
	case s := <-got:
		if !errors.Is(s.err, context.DeadlineExceeded) || !errors.Is(s.childErr, context.DeadlineExceeded) || s.childCause == nil {
			t.Errorf("handler saw ctx.Err %v, child.Err %v, context.Cause(child) %v; want DeadlineExceeded, DeadlineExceeded and a cause", s.err, s.childErr, s.childCause)
		}
		if !s.hasDeadline || s.id == "" {
			t.Errorf("through a child: deadline set %v, request id %q; want a deadline and the id", s.hasDeadline, s.id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never saw its context end")
	}
}
