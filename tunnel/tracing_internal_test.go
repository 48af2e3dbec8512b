package tunnel

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/rprtunnel/rpr/internal/wire"
)

// BenchmarkTracingNoop measures what one unary call costs in spans and
// measurements on both sides: a client span, a server span and a
// metrics begin/end on each side, with no providers configured (the
// otel global defaults) and, for comparison, with the SDKs.
func BenchmarkTracingNoop(b *testing.B) {
	b.Run("global", func(b *testing.B) { benchmarkTelemetry(b, nil, nil) })
	b.Run("sdk-trace", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		benchmarkTelemetry(b, tp, nil)
	})
	b.Run("sdk-metric", func(b *testing.B) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		benchmarkTelemetry(b, nil, mp)
	})
}

func benchmarkTelemetry(b *testing.B, tp trace.TracerProvider, mp metric.MeterProvider) {
	clientTracing, serverTracing := newTracing(tp, nil), newTracing(tp, nil)
	clientMetrics, err := newClientMetrics(mp)
	if err != nil {
		b.Fatal(err)
	}
	serverMetrics, err := newServerMetrics(mp)
	if err != nil {
		b.Fatal(err)
	}
	const full = "echo.v1.Echo/Echo"
	env := &wire.Request{ID: "20261129-GRT1-1795995318695-X857YZJDH0", Method: full, Attempt: 1}
	b.ReportAllocs()
	for b.Loop() {
		ctx, span := clientTracing.startClient(context.Background(), full, env.ID)
		measure := clientMetrics.begin(ctx, full)
		env.Header = clientTracing.inject(ctx, nil)
		sctx, sspan := serverTracing.startServer(context.Background(), env, "worker-1", 3*time.Millisecond)
		smeasure := serverMetrics.begin(sctx, full)
		smeasure.end(nil)
		endSpan(sspan, nil)
		measure.end(nil)
		endSpan(span, nil)
	}
}
