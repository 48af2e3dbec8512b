package admin

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// scopeName names the instrumentation scope of the gauges.
const scopeName = "github.com/rprtunnel/rpr/admin"

// DefaultDiscoveryInterval is how long RegisterMetrics reuses the list of
// services it discovered and the caps it read from their schemas before
// it looks again: a new service appears in the gauges within this long.
// Discovery SCANs the whole keyspace, which a scrape every few seconds
// should not repeat.
const DefaultDiscoveryInterval = 30 * time.Second

// DefaultMetricsTimeout bounds one collection of the gauges, below
// Prometheus's default scrape timeout (10s), so a stalled Redis costs a
// scrape its queue figures rather than the whole scrape.
const DefaultMetricsTimeout = 5 * time.Second

// metricsParallelism bounds how many services one collection reads at a
// time.
const metricsParallelism = 8

// MetricsOptions configure RegisterMetrics.
type MetricsOptions struct {
	// Services pins the services to export, in this order; nil or empty
	// discovers them (Client.Services) at most once per DiscoveryInterval.
	Services []string
	// DiscoveryInterval is how long a discovered service list, and the
	// caps read from the services' schemas, are reused; 0 means
	// DefaultDiscoveryInterval.
	DiscoveryInterval time.Duration
	// Timeout bounds one collection; 0 means DefaultMetricsTimeout.
	Timeout time.Duration
}

// gauge is one queue gauge: its name, unit and description, and the
// figure it reports.
type gauge struct {
	name, unit, desc string
	value            func(ServiceStats) float64
	perService       bool // rpc.service only; else per lane, with rpr.lane
}

// gauges are the cluster-wide queue gauges, in the order they are made.
var gauges = []gauge{
	{"rpr.queue.length", "{request}", "Requests in the lane's streams: waiting plus being worked on.", func(s ServiceStats) float64 { return float64(s.Length) }, false},
	{"rpr.queue.lag", "{request}", "Requests of the lane no worker has read yet.", func(s ServiceStats) float64 { return float64(s.Lag) }, false},
	{"rpr.queue.pending", "{request}", "Requests of the lane read by a worker and not yet acknowledged.", func(s ServiceStats) float64 { return float64(s.Pending) }, false},
	{"rpr.queue.oldest_pending_age", "s", "Age of the lane's oldest pending request.", func(s ServiceStats) float64 { return s.OldestPending.Seconds() }, false},
	{"rpr.queue.consumers", "{consumer}", "Consumers the workers groups of the lane know (live or not).", func(s ServiceStats) float64 { return float64(s.Consumers) }, false},
	{"rpr.queue.retrying", "{request}", "Async requests in the lane's retry sets, waiting for a retry or their scheduled time.", func(s ServiceStats) float64 { return float64(s.Retrying) }, false},
	{"rpr.queue.backlog", "{request}", "Requests of the lane counted against the service's cap: its streams' length plus its retry sets.", func(s ServiceStats) float64 { return float64(s.Length + s.Retrying) }, false},
	{"rpr.workers.live", "{worker}", "Workers serving the lane with a heartbeat in the last 5s.", func(s ServiceStats) float64 { return float64(s.LiveWorkers) }, false},
	{"rpr.dlq.length", "{request}", "Entries in the service's dead-letter streams (all lanes and shards).", func(s ServiceStats) float64 { return float64(s.DeadLetters) }, true},
	{"rpr.dlq.capacity", "{request}", "The cap of each of the service's dead-letter streams (one per shard) that its live workers announce (ServerOptions.MaxDeadLetters); 0 when none does.", func(s ServiceStats) float64 { return float64(s.DeadLetterCap) }, true},
	{"rpr.dlq.full", "1", "1 when a dead-letter stream of the service is at its cap: servers hold further dead letters back (nothing is dropped) until an operator replays or drops letters.", func(s ServiceStats) float64 {
		if s.DeadLettersFull {
			return 1
		}
		return 0
	}, true},
}

// RegisterMetrics registers observable gauges of the queues of every
// service of the deployment on mp (nil: otel.GetMeterProvider()), read
// from Redis each time mp's readers collect: what one exporter process
// (`rpr exporter`) serves for a whole deployment, so that worker replicas
// need not each export copies of the same cluster-wide figures. It uses
// only the OpenTelemetry metric API: the caller brings the SDK and the
// exporter. Unregister the returned registration to stop.
//
// The gauges, per lane (attributes rpc.service and rpr.lane, each over all
// the service's shards; see ServiceStats): rpr.queue.length, .lag,
// .pending, .oldest_pending_age (seconds), .consumers, .retrying and
// .backlog (length plus retrying, what the cap applies to), and
// rpr.workers.live. Per service (rpc.service alone): rpr.dlq.length,
// rpr.dlq.capacity (each dead-letter stream's cap, see
// ServiceStats.DeadLetterCap) and rpr.dlq.full (1 while one is at it),
// and rpr.queue.capacity, the service's backlog cap over all its lanes, read
// from its published schema ((rpr.v1.service).max_backlog, else
// tunnel.DefaultMaxBacklog), so that an alert can compare the backlog
// with it (clients refuse calls at 85% of it).
//
// Cost: one collection takes the two pipelined round trips of
// Service.LaneStats per service, up to 8 services at a time, within
// opts.Timeout. Every opts.DiscoveryInterval, the first collection also
// SCANs the keyspace for the services (unless opts.Services pins them)
// and reads their schemas, in one more pipelined round trip. A service
// that cannot be read is left out of that collection, and its error is
// returned from the callback (the SDK hands it to otel.Handle); the others'
// figures are still reported.
func (c *Client) RegisterMetrics(mp metric.MeterProvider, opts MetricsOptions) (metric.Registration, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultMetricsTimeout
	}
	meter := mp.Meter(scopeName)
	capacity, err := meter.Int64ObservableGauge("rpr.queue.capacity", metric.WithUnit("{request}"),
		metric.WithDescription("The service's backlog cap ((rpr.v1.service).max_backlog, else 100000), over all its lanes; clients refuse calls at 85% of it."))
	if err != nil {
		return nil, err
	}
	instruments := make([]metric.Float64ObservableGauge, len(gauges))
	observables := []metric.Observable{capacity}
	for i, g := range gauges {
		if instruments[i], err = meter.Float64ObservableGauge(g.name, metric.WithUnit(g.unit), metric.WithDescription(g.desc)); err != nil {
			return nil, err
		}
		observables = append(observables, instruments[i])
	}
	cat := newCatalog(c, opts.Services, opts.DiscoveryInterval)
	return meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
		services, caps, catErr := cat.get(ctx)
		samples := c.sample(ctx, services)
		errs := []error{catErr}
		for i, name := range services {
			if samples[i].err != nil {
				errs = append(errs, samples[i].err)
				continue
			}
			lanes := samples[i].lanes
			serviceAttr := attribute.String("rpc.service", name)
			attrs := metric.WithAttributeSet(attribute.NewSet(serviceAttr))
			o.ObserveInt64(capacity, caps[name], attrs)
			for j, g := range gauges {
				if g.perService {
					o.ObserveFloat64(instruments[j], g.value(lanes[0]), attrs)
				}
			}
			for _, st := range lanes {
				laneAttrs := metric.WithAttributeSet(attribute.NewSet(serviceAttr, attribute.String("rpr.lane", st.Lane)))
				for j, g := range gauges {
					if !g.perService {
						o.ObserveFloat64(instruments[j], g.value(st), laneAttrs)
					}
				}
			}
		}
		return errors.Join(errs...)
	}, observables...)
}

// sample is one service's figures in a collection, or why there are none.
type sample struct {
	lanes []ServiceStats
	err   error
}

// sample reads the lane figures of services, up to metricsParallelism at
// a time; out[i] is services[i]'s.
func (c *Client) sample(ctx context.Context, services []string) []sample {
	out := make([]sample, len(services))
	slots := make(chan struct{}, metricsParallelism)
	var wg sync.WaitGroup
	for i, name := range services {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			out[i].lanes, out[i].err = c.Service(name).LaneStats(ctx)
		})
	}
	wg.Wait()
	return out
}
