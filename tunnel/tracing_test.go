package tunnel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rprtunnel/rpr/tunnel"
)

// TestServerSpanIsChildOfClientSpan runs the client and the server with
// their own tracer providers and their own Redis connections (see newEnv),
// as two processes would, and checks that the trace crosses Redis.
func TestServerSpanIsChildOfClientSpan(t *testing.T) {
	clientSpans, serverSpans := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	clientTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(clientSpans))
	serverTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(serverSpans))
	e := newEnv(t, envConfig{
		client: tunnel.ClientOptions{TracerProvider: clientTP},
		server: tunnel.ServerOptions{TracerProvider: serverTP},
	})
	var rid string
	if _, err := e.call(context.Background(), "Fail", "traced", tunnel.CaptureRequestID(&rid)); tunnel.CodeOf(err) != tunnel.NotFound {
		t.Fatalf("call: %v", err)
	}
	client := findSpan(t, clientSpans, rid)
	waitFor(t, "the server span to end", func() bool { return spanFor(serverSpans, rid) != nil })
	server := spanFor(serverSpans, rid)

	if client.SpanKind() != trace.SpanKindClient || server.SpanKind() != trace.SpanKindServer {
		t.Errorf("kinds = %v / %v, want client / server", client.SpanKind(), server.SpanKind())
	}
	if server.Parent().SpanID() != client.SpanContext().SpanID() || server.SpanContext().TraceID() != client.SpanContext().TraceID() {
		t.Errorf("server span parent %v in trace %v; want client span %v in trace %v",
			server.Parent().SpanID(), server.SpanContext().TraceID(), client.SpanContext().SpanID(), client.SpanContext().TraceID())
	}
	for _, span := range []sdktrace.ReadOnlySpan{client, server} {
		attrs := attributeMap(span.Attributes())
		for key, want := range map[string]string{
			"rpc.system": "rpr", "rpc.service": echoService, "rpc.method": "Fail",
			"rpr.request_id": rid, "rpc.rpr.status_code": "5",
		} {
			if attrs[key] != want {
				t.Errorf("%v span: %s = %q, want %q", span.SpanKind(), key, attrs[key], want)
			}
		}
		if span.Name() != echoService+"/Fail" {
			t.Errorf("span name = %q", span.Name())
		}
	}
	if _, ok := attributeMap(server.Attributes())["rpr.queue_wait_ms"]; !ok {
		t.Error("server span has no queue wait")
	}
}

func findSpan(t *testing.T, rec *tracetest.SpanRecorder, rid string) sdktrace.ReadOnlySpan {
	t.Helper()
	if s := spanFor(rec, rid); s != nil {
		return s
	}
	t.Fatalf("no span for request %s", rid)
	return nil
}

func spanFor(rec *tracetest.SpanRecorder, rid string) sdktrace.ReadOnlySpan {
	for _, s := range rec.Ended() {
		if attributeMap(s.Attributes())["rpr.request_id"] == rid {
			return s
		}
	}
	return nil
}

func attributeMap(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}
