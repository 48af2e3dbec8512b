package tunnel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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

// A handler may keep its context after it returns (a goroutine it
// started, a log line written later): the context still reports that
// request's id, header, attempt and deadline, and its end, however many
// requests the server has handled since. The server reuses what a request
// held once it ends, so this is what keeps a kept context from reading
// another request's values.
func TestHandlerContextOutlivesItsRequest(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	quiet := slog.New(slog.DiscardHandler)
	type kept struct {
		ctx      context.Context
		value    string
		deadline time.Time
	}
	var mu sync.Mutex
	var contexts []kept
	startServer(t, rdb, tunnel.ServerOptions{Logger: quiet, Concurrency: 8}, func(s *tunnel.Server) {
		s.RegisterService(&echoDesc, map[string]echoHandler{"Echo": func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			deadline, _ := ctx.Deadline()
			mu.Lock()
			contexts = append(contexts, kept{ctx: ctx, value: in.GetValue(), deadline: deadline})
			mu.Unlock()
			return wrapperspb.String(tunnel.RequestIDFromContext(ctx)), nil
		}})
	})
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	waitAnswered(t, client, method("Echo"))
	const calls = 300
	ids := make(map[string]string, calls) // value sent -> request id answered
	var idsMu sync.Mutex
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < calls; i += 8 {
				value := fmt.Sprintf("call-%d", i)
				out := new(wrapperspb.StringValue)
				if err := client.Invoke(context.Background(), method("Echo"), wrapperspb.String(value), out, tunnel.WithHeader("x-value", value)); err != nil {
					t.Error(err)
					return
				}
				idsMu.Lock()
				ids[value] = out.GetValue()
				idsMu.Unlock()
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	checked := 0
	for _, k := range contexts {
		id, ok := ids[k.value]
		if !ok {
			continue // waitAnswered's
		}
		checked++
		// The server ends a request, and cancels its context, once it hears
		// that the script carrying the answer ran: the caller may have the
		// answer a moment before that.
		select {
		case <-k.ctx.Done():
		case <-time.After(10 * time.Second):
		}
		deadline, _ := k.ctx.Deadline()
		header := tunnel.HeaderFromContext(k.ctx)
		if got := tunnel.RequestIDFromContext(k.ctx); got != id || header.Get("x-value") != k.value || !deadline.Equal(k.deadline) ||
			tunnel.AttemptFromContext(k.ctx) != 1 || !errors.Is(k.ctx.Err(), context.Canceled) {
			t.Errorf("kept context of %s: id %q (want %q), header x-value %q, deadline %v (was %v), attempt %d, Err %v; want its own values and Canceled",
				k.value, got, id, header.Get("x-value"), deadline, k.deadline, tunnel.AttemptFromContext(k.ctx), k.ctx.Err())
		}
	}
	if checked != calls {
		t.Fatalf("checked %d kept contexts; want %d", checked, calls)
	}
}
