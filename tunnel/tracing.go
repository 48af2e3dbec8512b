package tunnel

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names rpr's instrumentation scope.
const tracerName = "github.com/rprtunnel/rpr/tunnel"

// Attribute keys rpr adds to the RPC semantic conventions.
const (
	attrStatusCode = attribute.Key("rpc.rpr.status_code") // like rpc.grpc.status_code
	attrRequestID  = attribute.Key("rpr.request_id")
	attrAttempt    = attribute.Key("rpr.attempt")
	attrQueueWait  = attribute.Key("rpr.queue_wait_ms")
	attrWorker     = attribute.Key("rpr.worker")
)

// tracing creates the spans of one Client or Server. A call's trace context
// travels in the envelope's metadata (W3C traceparent/tracestate), so the
// server span is a child of the client span across processes and networks.
type tracing struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
}

// newTracing uses tp, or the global TracerProvider when tp is nil, and
// W3C trace context unless another propagator is given.
func newTracing(tp trace.TracerProvider, prop propagation.TextMapPropagator) tracing {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return tracing{tracer: tp.Tracer(tracerName), propagator: prop}
}

// rpcAttributes are the semantic-convention attributes of a method.
func rpcAttributes(fullMethod string) []attribute.KeyValue {
	service, method, _ := strings.Cut(fullMethod, "/")
	return []attribute.KeyValue{
		attribute.String("rpc.system", "rpr"),
		semconv.RPCService(service),
		semconv.RPCMethod(method),
	}
}

// startClient starts the CLIENT span of a call.
func (t tracing) startClient(ctx context.Context, fullMethod, requestID string) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, fullMethod,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(rpcAttributes(fullMethod), attrRequestID.String(requestID))...))
}

// inject writes ctx's trace context into md, creating md if needed.
func (t tracing) inject(ctx context.Context, md Metadata) Metadata {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return md
	}
	if md == nil {
		md = Metadata{}
	}
	t.propagator.Inject(ctx, metadataCarrier(md))
	return md
}

// startServer starts the SERVER span of a request, as a child of the
// caller's span found in its metadata.
func (t tracing) startServer(ctx context.Context, env *requestEnvelope, worker string, queueWait time.Duration) (context.Context, trace.Span) {
	if env.Header != nil {
		ctx = t.propagator.Extract(ctx, metadataCarrier(env.Header))
	}
	attrs := append(rpcAttributes(env.Method),
		attrRequestID.String(env.ID),
		attrAttempt.Int(env.Attempt),
		attrQueueWait.Float64(float64(queueWait.Microseconds())/1000),
		attrWorker.String(worker),
	)
	return t.tracer.Start(ctx, env.Method, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// end records a call's outcome on span and ends it.
func endSpan(span trace.Span, err error) {
	code := CodeOf(err)
	span.SetAttributes(attrStatusCode.Int(int(code)))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// metadataCarrier adapts Metadata to OpenTelemetry's TextMapCarrier.
type metadataCarrier Metadata

func (c metadataCarrier) Get(key string) string { return Metadata(c).Get(key) }

func (c metadataCarrier) Set(key, value string) { Metadata(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
