package tunnel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestTraceContextWithoutTracerProvider: with no TracerProvider installed
// rpr starts no spans of its own, yet a caller's trace context still
// reaches the handler (and so the calls it makes in turn), unchanged.
func TestTraceContextWithoutTracerProvider(t *testing.T) {
	rs := redistest.Start(t)
	seen := make(chan trace.SpanContext, 1)
	startServer(t, rs.Client(t), tunnel.ServerOptions{}, func(s *tunnel.Server) {
		s.RegisterService(&echoDesc, map[string]echoHandler{"Echo": func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			if in.GetValue() == "traced" {
				seen <- trace.SpanContextFromContext(ctx)
			}
			return in, nil
		}})
	})
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	waitAnswered(t, client, method("Echo"))
	caller := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), caller)
	if err := client.Invoke(ctx, method("Echo"), wrapperspb.String("traced"), new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	got := <-seen
	if got.TraceID() != caller.TraceID() || got.SpanID() != caller.SpanID() || !got.IsRemote() {
		t.Errorf("handler's span context = %v %v remote=%v; want the caller's %v %v, remote", got.TraceID(), got.SpanID(), got.IsRemote(), caller.TraceID(), caller.SpanID())
	}
}
