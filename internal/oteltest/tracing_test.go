package oteltest_test

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
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

// TestSpanAttributes checks every attribute and status rpr gives its
// spans, for a call that succeeds and one that fails, and what Samplers
// see: the method's rpc.* attributes, given at the start (the per-call
// rpr.* ones are added once the span records).
func TestSpanAttributes(t *testing.T) {
	clientSampler, serverSampler := &startAttributes{}, &startAttributes{}
	clientSpans, serverSpans := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	e := newEnv(t, envConfig{
		client: tunnel.ClientOptions{TracerProvider: sdktrace.NewTracerProvider(
			sdktrace.WithSampler(clientSampler), sdktrace.WithSpanProcessor(clientSpans))},
		server: tunnel.ServerOptions{WorkerID: "worker-7", TracerProvider: sdktrace.NewTracerProvider(
			sdktrace.WithSampler(serverSampler), sdktrace.WithSpanProcessor(serverSpans))},
	})
	for _, tc := range []struct {
		method string
		code   tunnel.Code
		status codes.Code
	}{
		{"Echo", tunnel.OK, codes.Unset},
		{"Fail", tunnel.NotFound, codes.Error},
	} {
		var rid string
		_, err := e.call(context.Background(), tc.method, "traced", tunnel.CaptureRequestID(&rid))
		if tunnel.CodeOf(err) != tc.code {
			t.Fatalf("%s: %v", tc.method, err)
		}
		client := findSpan(t, clientSpans, rid)
		waitFor(t, "the server span to end", func() bool { return spanFor(serverSpans, rid) != nil })
		server := spanFor(serverSpans, rid)

		common := map[string]string{
			"rpc.system": "rpr", "rpc.service": echoService, "rpc.method": tc.method,
			"rpr.request_id": rid, "rpr.attempt": "1", "rpc.rpr.status_code": strconv.Itoa(int(tc.code)),
		}
		wants := map[sdktrace.ReadOnlySpan]map[string]string{client: common, server: {"rpr.worker": "worker-7"}}
		maps.Copy(wants[server], common)
		for span, want := range wants {
			attrs := attributeMap(span.Attributes())
			for key, value := range want {
				if attrs[key] != value {
					t.Errorf("%s %v span: %s = %q, want %q", tc.method, span.SpanKind(), key, attrs[key], value)
				}
			}
			if span.Status().Code != tc.status || (tc.status == codes.Error) != (span.Status().Description != "") {
				t.Errorf("%s %v span: status %+v, want code %v", tc.method, span.SpanKind(), span.Status(), tc.status)
			}
		}
		if _, ok := attributeMap(server.Attributes())["rpr.queue_wait_ms"]; !ok {
			t.Errorf("%s server span has no queue wait", tc.method)
		}
		if client.Status().Code == codes.Error && client.Status().Description != err.Error() {
			t.Errorf("client span status %q, want the call's error %q", client.Status().Description, err)
		}

		for sampler, kind := range map[*startAttributes]trace.SpanKind{clientSampler: trace.SpanKindClient, serverSampler: trace.SpanKindServer} {
			seen := attributeMap(sampler.of(echoService + "/" + tc.method))
			for _, key := range []string{"rpc.system", "rpc.service", "rpc.method"} {
				if seen[key] != common[key] {
					t.Errorf("%s %v sampler: %s = %q, want %q", tc.method, kind, key, seen[key], common[key])
				}
			}
		}
	}
}

// startAttributes is a Sampler that samples every span and keeps the
// attributes each span name had when it started.
type startAttributes struct {
	mu    sync.Mutex
	attrs map[string][]attribute.KeyValue
}

func (s *startAttributes) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attrs == nil {
		s.attrs = map[string][]attribute.KeyValue{}
	}
	s.attrs[p.Name] = slices.Clone(p.Attributes)
	return sdktrace.AlwaysSample().ShouldSample(p)
}

func (s *startAttributes) Description() string { return "startAttributes" }

// of returns the attributes the last span named name started with.
func (s *startAttributes) of(name string) []attribute.KeyValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attrs[name]
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
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}
