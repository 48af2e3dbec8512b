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

	"github.com/rprtunnel/rpr/internal/wire"
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
	methods    *boundedCache[string, methodSpans]
	// unset is the global TracerProvider as it was when the tracing was
	// made, for a tracing that uses the global one. While it is still the
	// global one, nobody installed a provider, every span would be a
	// no-op, and none is started (off): that saved a span and a context
	// on each side of every call. Once a provider is installed, tracer
	// (taken from the global one) delegates to it.
	unset trace.TracerProvider
}

// newTracing uses tp, or the global TracerProvider when tp is nil, and
// W3C trace context unless another propagator is given.
func newTracing(tp trace.TracerProvider, prop propagation.TextMapPropagator) tracing {
	var unset trace.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
		unset = tp
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return tracing{tracer: tp.Tracer(tracerName), propagator: prop, methods: &boundedCache[string, methodSpans]{}, unset: unset}
}

// off reports whether spans would record nothing: the tracing uses the
// global TracerProvider and none has been installed.
func (t tracing) off() bool { return t.unset != nil && otel.GetTracerProvider() == t.unset }

// noSpan is what a call has for a span while tracing is off: a no-op
// span, never the caller's own (which the call must not end).
var noSpan = trace.SpanFromContext(context.Background())

// Span kinds as start options, made once: options are immutable values.
var (
	clientKind = trace.WithSpanKind(trace.SpanKindClient)
	serverKind = trace.WithSpanKind(trace.SpanKindServer)
)

// methodSpans are the start options every span of one method shares: its
// kind and its rpc.* attributes, built once per method (tracing.methods)
// instead of once per call.
//
// Only these attributes are given at the start, where Samplers and
// SpanProcessor.OnStart see them; the per-call rpr.* ones (request id,
// attempt, queue wait, worker) are set just after, and only on a span that
// records. This is deliberate: building them cost allocations on every
// call even when nothing records (no SDK installed, or the call not
// sampled), while samplers decide on the method or the parent, not on a
// request id or a worker. A recorded span has the same attributes either
// way.
type methodSpans struct {
	client, server []trace.SpanStartOption
}

// newMethodSpans builds the start options of fullMethod's spans.
func newMethodSpans(fullMethod string) methodSpans {
	attrs := trace.WithAttributes(rpcAttributes(fullMethod)...)
	return methodSpans{
		client: []trace.SpanStartOption{clientKind, attrs},
		server: []trace.SpanStartOption{serverKind, attrs},
	}
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

// startClient starts the CLIENT span of a call (attributes: see methodSpans).
func (t tracing) startClient(ctx context.Context, fullMethod, requestID string) (context.Context, trace.Span) {
	if t.off() {
		return ctx, noSpan // ctx's own trace context, if any, is still passed on (inject)
	}
	ctx, span := t.tracer.Start(ctx, fullMethod, t.methods.get(fullMethod, newMethodSpans).client...)
	if span.IsRecording() {
		span.SetAttributes(attrRequestID.String(requestID))
	}
	return ctx, span
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
// caller's span found in its metadata (attributes: see methodSpans).
func (t tracing) startServer(ctx context.Context, env *wire.Request, worker string, queueWait time.Duration) (context.Context, trace.Span) {
	if env.Header != nil {
		ctx = t.propagator.Extract(ctx, metadataCarrier(env.Header))
	}
	if t.off() {
		return ctx, noSpan // the caller's trace context is still the handler's
	}
	ctx, span := t.tracer.Start(ctx, env.Method, t.methods.get(env.Method, newMethodSpans).server...)
	if span.IsRecording() {
		span.SetAttributes(
			attrRequestID.String(env.ID),
			attrAttempt.Int(env.Attempt),
			attrQueueWait.Float64(float64(queueWait.Microseconds())/1000),
			attrWorker.String(worker),
		)
	}
	return ctx, span
}

// endSpan records a call's outcome on span and ends it; a span that does
// not record skips the attribute and status it would drop anyway.
func endSpan(span trace.Span, err error) {
	if span.IsRecording() {
		span.SetAttributes(attrStatusCode.Int(int(CodeOf(err))))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
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
