package tunnel

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names. Durations are in seconds, as OpenTelemetry's RPC
// conventions ask; the Prometheus exporter adds the unit suffix
// (rpr_client_call_duration_seconds, ...).
const (
	metricClientDuration = "rpr.client.call.duration"
	metricClientInFlight = "rpr.client.calls.in_flight"
	metricServerDuration = "rpr.server.call.duration"
	metricServerInFlight = "rpr.server.calls.in_flight"
	metricQueueWait      = "rpr.server.queue_wait"
)

// durationBuckets spans a fast local call to a slow queued one.
var durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// callMetrics are the instruments of one side (client or server).
type callMetrics struct {
	duration  metric.Float64Histogram
	inFlight  metric.Int64UpDownCounter
	queueWait metric.Float64Histogram // server only
	slotWait  metric.Float64Histogram // client only
	batchSize metric.Int64Histogram
	messages  metric.Int64Counter // stream messages sent and received
	held      metric.Int64Counter // server only: dead letters held at the cap
	attrs     *attributeSets
	// streamAttrs caches the attribute sets of messages, by method and
	// direction.
	streamAttrs *boundedCache[[2]string, metric.AddOption]
}

// attributeSets caches the attribute sets measurements carry, by method
// and code: building one per call cost more than the rest of recording.
type attributeSets struct {
	sets boundedCache[attributeKey, measurementAttrs]
}

type attributeKey struct {
	method string
	code   Code
	coded  bool // whether the set has the status code
}

// measurementAttrs is one attribute set in the forms instruments take,
// the option lists made once so that a measurement does not allocate them.
type measurementAttrs struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

// lookup returns the set of method, with code when coded, as option lists.
func (a *attributeSets) lookup(method string, code Code, coded bool) measurementAttrs {
	return a.sets.get(attributeKey{method, code, coded}, newMeasurementAttrs)
}

// newMeasurementAttrs builds the attribute set of key.
func newMeasurementAttrs(key attributeKey) measurementAttrs {
	attrs := rpcAttributes(key.method)
	if key.coded {
		attrs = append(attrs, attrStatusCode.Int(int(key.code)))
	}
	option := metric.WithAttributeSet(attribute.NewSet(attrs...))
	return measurementAttrs{add: []metric.AddOption{option}, record: []metric.RecordOption{option}}
}

// boundedCache memoizes values by key, up to maxCacheEntries of them.
// Keys derive from method names, which come from the wire, so the bound
// keeps a flood of bogus names from growing memory: beyond it, values are
// built on every get.
//
// Every call reads these caches and almost none adds to them, so a read
// is one lookup in an immutable map of K, and an addition copies the map
// (at most maxCacheEntries times over a cache's life). A sync.Map hashed
// each key through an interface: for the composite keys of the hot path
// ([2]string, attributeKey) that hashing was most of a lookup's cost.
type boundedCache[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V] // never written once stored
	mu sync.Mutex              // serializes additions
}

// maxCacheEntries bounds each boundedCache.
const maxCacheEntries = 4096

// get returns the value of key, built by build if it is not cached.
func (c *boundedCache[K, V]) get(key K, build func(K) V) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[key]; ok {
			return v
		}
	}
	v := build(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	var cached map[K]V
	if m := c.m.Load(); m != nil {
		cached = *m
	}
	if _, ok := cached[key]; ok || len(cached) >= maxCacheEntries {
		return v // added by another get meanwhile, or the cache is full
	}
	next := make(map[K]V, len(cached)+1)
	maps.Copy(next, cached)
	next[key] = v
	c.m.Store(&next)
	return v
}

// newClientMetrics makes a Client's instruments from mp (default: the
// global MeterProvider).
func newClientMetrics(mp metric.MeterProvider) (callMetrics, error) {
	meter := meterOf(mp)
	m := callMetrics{attrs: &attributeSets{}, streamAttrs: &boundedCache[[2]string, metric.AddOption]{}}
	var err1, err2, err3, err4 error
	m.batchSize, err4 = meter.Int64Histogram("rpr.client.batch.size",
		metric.WithDescription("Requests per pipeline or script call a client sends, by kind (send: unary requests; enqueue: async requests) and cause (full: cut at the batch limit; drained: all that was waiting)."),
		metric.WithUnit("{request}"), metric.WithExplicitBucketBoundaries(batchBuckets...))
	m.slotWait, err3 = meter.Float64Histogram("rpr.client.slot_wait",
		metric.WithDescription("Time calls waited for one of the client's in-flight slots (ClientOptions.MaxInFlight); zero when one was free."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	m.duration, err1 = meter.Float64Histogram(metricClientDuration,
		metric.WithDescription("Time from a call's start to its outcome as the caller sees it, retries included."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	m.inFlight, err2 = meter.Int64UpDownCounter(metricClientInFlight,
		metric.WithDescription("Calls started and not yet finished."), metric.WithUnit("{call}"))
	var err5 error
	m.messages, err5 = meter.Int64Counter("rpr.client.stream.messages",
		metric.WithDescription("Messages of streaming calls the client sent and received, by method and direction (sent, received)."),
		metric.WithUnit("{message}"))
	var err6 error
	m.held, err6 = meter.Int64Counter("rpr.server.dead_letters.held",
		metric.WithDescription("Dead letters held back because the service's dead-letter stream was at its cap (ServerOptions.MaxDeadLetters): requests kept in the retry set, unreadable entries left pending, until an operator makes room."),
		metric.WithUnit("{request}"))
	return m, errors.Join(err1, err2, err3, err4, err5, err6)
}

// deadLetterHeld counts one dead letter of service held back at its
// stream's cap.
func (m callMetrics) deadLetterHeld(service string) {
	if m.held == nil {
		return
	}
	m.held.Add(context.Background(), 1, metric.WithAttributes(attribute.String("rpc.service", service)))
}

// newServerMetrics makes a Server's instruments from mp.
func newServerMetrics(mp metric.MeterProvider) (callMetrics, error) {
	meter := meterOf(mp)
	m := callMetrics{attrs: &attributeSets{}, streamAttrs: &boundedCache[[2]string, metric.AddOption]{}}
	var err1, err2, err3, err4 error
	m.batchSize, err4 = meter.Int64Histogram("rpr.server.batch.size",
		metric.WithDescription("Requests per read or per completion script call, by kind (read, complete) and cause (full: cut at the batch limit; drained: all that was waiting)."),
		metric.WithUnit("{request}"), metric.WithExplicitBucketBoundaries(batchBuckets...))
	m.duration, err1 = meter.Float64Histogram(metricServerDuration,
		metric.WithDescription("Time a handler took, from claiming the request to its answer being written."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	m.inFlight, err2 = meter.Int64UpDownCounter(metricServerInFlight,
		metric.WithDescription("Requests being handled."), metric.WithUnit("{call}"))
	m.queueWait, err3 = meter.Float64Histogram(metricQueueWait,
		metric.WithDescription("Time a request waited in Redis between the client sending it and a worker taking it."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	var err5 error
	m.messages, err5 = meter.Int64Counter("rpr.server.stream.messages",
		metric.WithDescription("Messages of streaming calls the server sent and received, by method and direction (sent, received)."),
		metric.WithUnit("{message}"))
	return m, errors.Join(err1, err2, err3, err4, err5)
}

// streamMessage counts one message of a streaming call of method,
// direction "sent" or "received".
func (m callMetrics) streamMessage(ctx context.Context, method, direction string) {
	if m.messages == nil || !m.messages.Enabled(ctx) {
		return
	}
	attrs := m.streamAttrs.get([2]string{method, direction}, func(key [2]string) metric.AddOption {
		return metric.WithAttributeSet(attribute.NewSet(append(rpcAttributes(key[0]), attribute.String("rpr.direction", key[1]))...))
	})
	m.messages.Add(ctx, 1, attrs)
}

// batchBuckets are powers of two up to the largest batch rpr makes.
var batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}

// batchObserver returns the func that records the size of one kind of
// batch, for coalescer.observe.
func (m callMetrics) batchObserver(kind string) func(size int, full bool) {
	attrs := map[bool][]metric.RecordOption{} // lists made once: a record allocates none
	for _, full := range []bool{false, true} {
		cause := "drained"
		if full {
			cause = "full"
		}
		attrs[full] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", kind), attribute.String("cause", cause)))}
	}
	return func(size int, full bool) {
		m.batchSize.Record(context.Background(), int64(size), attrs[full]...)
	}
}

func meterOf(mp metric.MeterProvider) metric.Meter {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return mp.Meter(tracerName)
}

// callMeasure is one call's measurement in progress (see callMetrics.begin).
// Its instruments are nil when they were off as the call began.
type callMeasure struct {
	ctx           context.Context
	method        string
	attrs         *attributeSets
	inFlight      metric.Int64UpDownCounter
	inFlightAttrs []metric.AddOption
	duration      metric.Float64Histogram
	began         time.Time
}

// begin counts a call in flight and returns its measurement, which the
// caller must end. An instrument that is off as the call begins (no SDK
// installed, or a view drops it) stays out of the whole call: this costs
// next to nothing, and a MeterProvider installed meanwhile sees no end
// without its start.
func (m callMetrics) begin(ctx context.Context, fullMethod string) callMeasure {
	c := callMeasure{ctx: ctx, method: fullMethod, attrs: m.attrs}
	if m.inFlight.Enabled(ctx) {
		c.inFlight, c.inFlightAttrs = m.inFlight, m.attrs.lookup(fullMethod, OK, false).add
		c.inFlight.Add(ctx, 1, c.inFlightAttrs...)
	}
	if m.duration.Enabled(ctx) {
		c.duration, c.began = m.duration, time.Now()
	}
	return c
}

// end records the call's outcome: it is no longer in flight, and its
// duration by code.
func (c callMeasure) end(err error) {
	if c.inFlight != nil {
		c.inFlight.Add(c.ctx, -1, c.inFlightAttrs...)
	}
	if c.duration != nil {
		c.duration.Record(c.ctx, time.Since(c.began).Seconds(), c.attrs.lookup(c.method, CodeOf(err), true).record...)
	}
}
