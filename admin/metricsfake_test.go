package admin_test

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
	"go.opentelemetry.io/otel/metric/noop"
)

// fakeProvider is a metric.MeterProvider that keeps what is registered on
// it and runs the callbacks when the test collects: enough of a metrics
// SDK to test RegisterMetrics without depending on one (the runtime
// module's tests use the OpenTelemetry API only). Instruments other than
// observable gauges are no-ops.
type fakeProvider struct {
	embedded.MeterProvider
	meter fakeMeter
}

func (p *fakeProvider) Meter(string, ...metric.MeterOption) metric.Meter { return &p.meter }

// fakeMeter records observable gauges and callbacks.
type fakeMeter struct {
	noop.Meter

	mu        sync.Mutex
	gauges    map[string]gaugeInfo
	callbacks map[int]metric.Callback
	next      int
}

// gaugeInfo is what a gauge was registered with.
type gaugeInfo struct{ unit, desc string }

// floatGauge and intGauge are observable gauges that know their names; the
// noop instruments they embed make them the API's interfaces.
type floatGauge struct {
	noop.Float64ObservableGauge
	name string
}

type intGauge struct {
	noop.Int64ObservableGauge
	name string
}

func (m *fakeMeter) note(name, unit, desc string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gauges == nil {
		m.gauges = map[string]gaugeInfo{}
	}
	m.gauges[name] = gaugeInfo{unit, desc}
}

func (m *fakeMeter) Float64ObservableGauge(name string, opts ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	cfg := metric.NewFloat64ObservableGaugeConfig(opts...)
	m.note(name, cfg.Unit(), cfg.Description())
	return &floatGauge{name: name}, nil
}

func (m *fakeMeter) Int64ObservableGauge(name string, opts ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	cfg := metric.NewInt64ObservableGaugeConfig(opts...)
	m.note(name, cfg.Unit(), cfg.Description())
	return &intGauge{name: name}, nil
}

func (m *fakeMeter) RegisterCallback(f metric.Callback, _ ...metric.Observable) (metric.Registration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.callbacks == nil {
		m.callbacks = map[int]metric.Callback{}
	}
	id := m.next
	m.next++
	m.callbacks[id] = f
	return &fakeRegistration{unregister: func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.callbacks, id)
	}}, nil
}

type fakeRegistration struct {
	embedded.Registration
	unregister func()
}

func (r *fakeRegistration) Unregister() error {
	r.unregister()
	return nil
}

// collect runs every registered callback, as a reader's collection would,
// and returns the points observed, by point name (see pointName), and the
// callbacks' errors.
func (m *fakeMeter) collect(ctx context.Context) (map[string]float64, []error) {
	m.mu.Lock()
	callbacks := make([]metric.Callback, 0, len(m.callbacks))
	for _, f := range m.callbacks {
		callbacks = append(callbacks, f)
	}
	m.mu.Unlock()
	o := &fakeObserver{points: map[string]float64{}}
	var errs []error
	for _, f := range callbacks {
		if err := f(ctx, o); err != nil {
			errs = append(errs, err)
		}
	}
	return o.points, errs
}

// fakeObserver records observations.
type fakeObserver struct {
	embedded.Observer
	points map[string]float64
}

// pointName names a point: the gauge's name and its attributes, as
// `rpr.queue.length{rpc.service=pkg.Svc,rpr.lane=default}`.
func pointName(gauge string, attrs attribute.Set) string {
	return fmt.Sprintf("%s{%s}", gauge, attrs.Encoded(attribute.DefaultEncoder()))
}

func (o *fakeObserver) ObserveFloat64(obs metric.Float64Observable, v float64, opts ...metric.ObserveOption) {
	o.points[pointName(obs.(*floatGauge).name, metric.NewObserveConfig(opts).Attributes())] = v
}

func (o *fakeObserver) ObserveInt64(obs metric.Int64Observable, v int64, opts ...metric.ObserveOption) {
	o.points[pointName(obs.(*intGauge).name, metric.NewObserveConfig(opts).Attributes())] = float64(v)
}
