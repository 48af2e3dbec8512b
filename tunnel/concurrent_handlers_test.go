package tunnel_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestRequestsReadTogetherRunTogether: handlers of a burst of calls, read
// by the server in batches, run at the same time, up to the server's
// Concurrency: none waits for another's handler to return. Each handler
// here returns only once all of them have started, so a request left
// waiting behind another's handler would hold every call until its
// deadline.
func TestRequestsReadTogetherRunTogether(t *testing.T) {
	const calls = 32
	rdb := redistest.Start(t).Client(t)
	var started sync.WaitGroup
	started.Add(calls)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	startServer(t, rdb, tunnel.ServerOptions{Concurrency: calls, Logger: slog.New(slog.DiscardHandler)}, func(s *tunnel.Server) {
		s.RegisterService(&echoDesc, map[string]echoHandler{"Echo": func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			if in.GetValue() == "warm" { // echoClient's first call
				return in, nil
			}
			started.Done()
			select {
			case <-all:
				return in, nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}})
	})
	client := echoClient(t, rdb)

	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for range calls {
		wg.Go(func() {
			// A bound against waiting forever, not a timing claim.
			errs <- client.Invoke(context.Background(), method("Echo"), wrapperspb.String("x"), new(wrapperspb.StringValue), tunnel.WithTimeout(30*time.Second))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("call: %v (a handler waited for another to return)", err)
		}
	}
}
