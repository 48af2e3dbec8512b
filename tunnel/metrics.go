package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
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
	attrs     *attributeSets
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
	option metric.MeasurementOption
	add    []metric.AddOption
	record []metric.RecordOption
}

// get returns the set of method, with code when coded.
func (a *attributeSets) get(method string, code Code, coded bool) metric.MeasurementOption {
	return a.lookup(method, code, coded).option
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
	return measurementAttrs{option: option, add: []metric.AddOption{option}, record: []metric.RecordOption{option}}
}

// boundedCache memoizes values by key, up to maxCacheEntries of them.
// Keys derive from method names, which come from the wire, so the bound
// keeps a flood of bogus names from growing memory: beyond it, values are
// built on every get.
type boundedCache[K comparable, V any] struct {
	m    sync.Map // K -> V
	size atomic.Int32
}

// maxCacheEntries bounds each boundedCache.
const maxCacheEntries = 4096

// get returns the value of key, built by build if it is not cached.
func (c *boundedCache[K, V]) get(key K, build func(K) V) V {
	if v, ok := c.m.Load(key); ok {
		return v.(V)
	}
	v := build(key)
	if c.size.Load() < maxCacheEntries {
		if _, loaded := c.m.LoadOrStore(key, v); !loaded {
			c.size.Add(1)
		}
	}
	return v
}

// newClientMetrics makes a Client's instruments from mp (default: the
// global MeterProvider).
func newClientMetrics(mp metric.MeterProvider) (callMetrics, error) {
	meter := meterOf(mp)
	m := callMetrics{attrs: &attributeSets{}}
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
	return m, errors.Join(err1, err2, err3, err4)
}

// newServerMetrics makes a Server's instruments from mp.
func newServerMetrics(mp metric.MeterProvider) (callMetrics, error) {
	meter := meterOf(mp)
	m := callMetrics{attrs: &attributeSets{}}
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
	return m, errors.Join(err1, err2, err3, err4)
}

// batchBuckets are powers of two up to the largest batch rpr makes.
var batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}

// batchObserver returns the func that records the size of one kind of
// batch, for coalescer.observe.
func (m callMetrics) batchObserver(kind string) func(size int, full bool) {
	attrs := map[bool]metric.MeasurementOption{}
	for _, full := range []bool{false, true} {
		cause := "drained"
		if full {
			cause = "full"
		}
		attrs[full] = metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", kind), attribute.String("cause", cause)))
	}
	return func(size int, full bool) {
		m.batchSize.Record(context.Background(), int64(size), attrs[full])
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

// prometheusEndpoint serves a MeterProvider's metrics at /metrics on addr,
// for ServerOptions.PrometheusAddr.
type prometheusEndpoint struct {
	provider *sdkmetric.MeterProvider
	server   *http.Server
	listener net.Listener
}

// newPrometheusEndpoint listens on addr (":9464", "127.0.0.1:0", ...) and
// returns a MeterProvider whose instruments it exposes.
func newPrometheusEndpoint(addr string) (*prometheusEndpoint, error) {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, fmt.Errorf("rpr: Prometheus exporter: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rpr: ServerOptions.PrometheusAddr %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	return &prometheusEndpoint{
		provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)),
		server:   &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		listener: ln,
	}, nil
}

// serve runs until close.
func (p *prometheusEndpoint) serve() error {
	if err := p.server.Serve(p.listener); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// close stops the HTTP server and the provider.
func (p *prometheusEndpoint) close(ctx context.Context) {
	_ = p.server.Shutdown(ctx)
	_ = p.provider.Shutdown(ctx)
}

// serviceGauges registers observable gauges of each service's queues (the
// InspectLanes view), read from Redis when the metrics are collected: two
// pipelined round trips per service per scrape. Queue gauges are per lane
// (attributes rpc.service and rpr.lane, each over all the service's
// shards); the dead-letter count and the backlog cap are per service
// (rpc.service alone). The returned registration must be unregistered
// when the server stops. capacity maps each service to its backlog cap,
// exported beside the backlog so that an alert can compare the two (the
// cap applies to the sum of the backlogs of the service's lanes).
func serviceGauges(mp metric.MeterProvider, rdb redis.UniversalClient, prefix string, services []string, capacity map[string]int64) (metric.Registration, error) {
	meter := meterOf(mp)
	defs := []struct {
		name, unit, desc string
		value            func(ServiceStats) float64
		perService       bool
	}{
		{"rpr.queue.length", "{request}", "Requests in the lane's streams: waiting plus being worked on.", func(s ServiceStats) float64 { return float64(s.Length) }, false},
		{"rpr.queue.lag", "{request}", "Requests of the lane no worker has read yet.", func(s ServiceStats) float64 { return float64(s.Lag) }, false},
		{"rpr.queue.pending", "{request}", "Requests of the lane read by a worker and not yet acknowledged.", func(s ServiceStats) float64 { return float64(s.Pending) }, false},
		{"rpr.queue.oldest_pending_age", "s", "Age of the lane's oldest pending request.", func(s ServiceStats) float64 { return s.OldestPending.Seconds() }, false},
		{"rpr.queue.consumers", "{consumer}", "Consumers the workers groups of the lane know (live or not).", func(s ServiceStats) float64 { return float64(s.Consumers) }, false},
		{"rpr.queue.retrying", "{request}", "Async requests in the lane's retry sets, waiting for a retry or their scheduled time.", func(s ServiceStats) float64 { return float64(s.Retrying) }, false},
		{"rpr.queue.backlog", "{request}", "Requests of the lane counted against the service's cap: its streams' length plus its retry sets.", func(s ServiceStats) float64 { return float64(s.Length + s.Retrying) }, false},
		{"rpr.workers.live", "{worker}", "Workers serving the lane with a heartbeat in the last 5s.", func(s ServiceStats) float64 { return float64(s.LiveWorkers) }, false},
		{"rpr.dlq.length", "{request}", "Entries in the service's dead-letter streams (all lanes and shards).", func(s ServiceStats) float64 { return float64(s.DeadLetters) }, true},
	}
	capacityGauge, err := meter.Int64ObservableGauge("rpr.queue.capacity", metric.WithUnit("{request}"),
		metric.WithDescription("The service's backlog cap ((rpr.v1.service).max_backlog, else 100000), over all its lanes; clients refuse calls at 85% of it."))
	if err != nil {
		return nil, err
	}
	gauges := make([]metric.Float64ObservableGauge, len(defs))
	observables := []metric.Observable{capacityGauge}
	for i, d := range defs {
		if gauges[i], err = meter.Float64ObservableGauge(d.name, metric.WithUnit(d.unit), metric.WithDescription(d.desc)); err != nil {
			return nil, err
		}
		observables = append(observables, gauges[i])
	}
	return meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var errs []error
		for _, service := range services {
			lanes, err := InspectLanes(ctx, rdb, prefix, service)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			serviceAttr := attribute.String("rpc.service", service)
			attrs := metric.WithAttributeSet(attribute.NewSet(serviceAttr))
			o.ObserveInt64(capacityGauge, capacity[service], attrs)
			for i, d := range defs {
				if d.perService {
					o.ObserveFloat64(gauges[i], d.value(lanes[0]), attrs)
				}
			}
			for _, stats := range lanes {
				laneAttrs := metric.WithAttributeSet(attribute.NewSet(serviceAttr, attribute.String("rpr.lane", stats.Lane)))
				for i, d := range defs {
					if !d.perService {
						o.ObserveFloat64(gauges[i], d.value(stats), laneAttrs)
					}
				}
			}
		}
		return errors.Join(errs...)
	}, observables...)
}
