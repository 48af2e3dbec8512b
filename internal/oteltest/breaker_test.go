package oteltest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

// breakerMetrics reads a client's breaker instruments.
type breakerMetrics struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
}

func newBreakerEnv(t *testing.T, opts tunnel.BreakerOptions) (*env, breakerMetrics) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	e := newEnv(t, envConfig{client: tunnel.ClientOptions{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		Breaker:       opts,
	}})
	return e, breakerMetrics{t: t, reader: reader}
}

func (m breakerMetrics) collect() metricdata.ResourceMetrics {
	m.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		m.t.Fatal(err)
	}
	return rm
}

// state returns the rpr.client.breaker.state of a breaker (a service name
// or "redis"), and false if it has none.
func (m breakerMetrics) state(name string) (int64, bool) {
	for _, sm := range m.collect().ScopeMetrics {
		for _, metric := range sm.Metrics {
			g, ok := metric.Data.(metricdata.Gauge[int64])
			if metric.Name != "rpr.client.breaker.state" || !ok {
				continue
			}
			for _, dp := range g.DataPoints {
				if v, _ := dp.Attributes.Value("rpc.service"); v.AsString() == name {
					return dp.Value, true
				}
			}
		}
	}
	return 0, false
}

// transitions returns how often a breaker entered each state.
func (m breakerMetrics) transitions(name string) map[string]int64 {
	out := map[string]int64{}
	for _, sm := range m.collect().ScopeMetrics {
		for _, metric := range sm.Metrics {
			s, ok := metric.Data.(metricdata.Sum[int64])
			if metric.Name != "rpr.client.breaker.transitions" || !ok {
				continue
			}
			for _, dp := range s.DataPoints {
				service, _ := dp.Attributes.Value("rpc.service")
				state, _ := dp.Attributes.Value("rpr.breaker.state")
				if service.AsString() == name {
					out[state.AsString()] += dp.Value
				}
			}
		}
	}
	return out
}

// isBreakerRefusal reports whether err is a circuit breaker's refusal.
func isBreakerRefusal(err error) bool {
	return tunnel.CodeOf(err) == tunnel.Unavailable && strings.Contains(err.Error(), "circuit open")
}

// checkBreakerRefusal checks what a breaker's refusal says: UNAVAILABLE, not
// executed, naming what is down and when the next probe is, with a
// RetryInfo of at most the cool-down.
func checkBreakerRefusal(t *testing.T, err error, names string, coolDown time.Duration) {
	t.Helper()
	if !isBreakerRefusal(err) {
		t.Fatalf("want a breaker refusal, got %v", err)
	}
	if !tunnel.NotExecuted(err) {
		t.Errorf("refusal is not NotExecuted: %v", err)
	}
	for _, want := range []string{names, "next probe in", "not sent"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, err)
		}
	}
	after, ok := tunnel.RetryAfter(err)
	if !ok || after < 0 || after > coolDown {
		t.Errorf("refusal's RetryInfo = %v, %v; want a delay within the %v cool-down", after, ok, coolDown)
	}
	if r := tunnel.ErrorReason(err); r != tunnel.ReasonCircuitOpen {
		t.Errorf("refusal's reason = %q, want %s", r, tunnel.ReasonCircuitOpen)
	}
}

// serveEchoAgain starts a second Server of the echo service on the env's
// Redis; Cleanup stops it.
func (e *env) serveEchoAgain() {
	e.t.Helper()
	srv, err := tunnel.NewServer(e.rdb, tunnel.ServerOptions{Logger: e.logger().With("server", 2)})
	if err != nil {
		e.t.Fatal(err)
	}
	srv.RegisterService(&echoDesc, e.handlers())
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				e.t.Errorf("second Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			e.t.Error("second Serve did not return 30s after its context ended")
		}
	})
}

func (e *env) echoQueueLen() int64 {
	e.t.Helper()
	n, err := e.rdb.XLen(context.Background(), "rpr:v1:{"+echoService+"}:requests").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) callWithTimeout(d time.Duration, name, in string) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := e.call(ctx, name, in)
	return err
}

// The scenario: the server goes away, the breaker opens after the
// threshold and calls fail at once without sending anything; the server
// comes back and the breaker closes: through a half-open probe after the
// cool-down, or at once when the client's refresh finds the server live
// and the breaker had opened on calls that found none.
func TestBreakerOpensWhenServerGoesAwayAndClosesWhenItReturns(t *testing.T) {
	const threshold = 3
	// Long enough that the refusals below happen before the first probe,
	// short enough that the test does not wait long for it.
	const coolDown = time.Second
	e, m := newBreakerEnv(t, tunnel.BreakerOptions{FailureThreshold: threshold, CoolDown: coolDown})
	if got, err := e.call(context.Background(), "Echo", "x"); err != nil || got != "echo: x" {
		t.Fatalf("first call: %q, %v", got, err)
	}
	if s, ok := m.state(echoService); !ok || s != 0 {
		t.Fatalf("breaker state = %d, %v; want 0 (closed)", s, ok)
	}

	e.stopServerAndWait()
	// Each call fails: "no live server", or, until the client's next look
	// at the heartbeats, DEADLINE_EXCEEDED in the queue (not executed).
	// Exactly threshold of them go through; then the breaker refuses.
	var failures int
	var refusal error
	for refusal == nil {
		err := e.callWithTimeout(300*time.Millisecond, "Echo", "x")
		switch {
		case isBreakerRefusal(err):
			refusal = err
		case tunnel.CodeOf(err) == tunnel.Unavailable && strings.Contains(err.Error(), "no live server"),
			tunnel.CodeOf(err) == tunnel.DeadlineExceeded && tunnel.NotExecuted(err):
			failures++
			if failures > threshold {
				t.Fatalf("call %d after the server left still went through: %v", failures, err)
			}
		default:
			t.Fatalf("call with no server: %v", err)
		}
	}
	if failures != threshold {
		t.Fatalf("the breaker opened after %d failures, want %d", failures, threshold)
	}
	t.Logf("refusal: %v", refusal)
	checkBreakerRefusal(t, refusal, "for service "+echoService+" after 3 consecutive failures", coolDown)
	if s, _ := m.state(echoService); s != 2 {
		t.Errorf("breaker state = %d, want 2 (open)", s)
	}
	if s, _ := m.state("redis"); s != 0 {
		t.Errorf("Redis breaker state = %d, want 0 (closed): Redis answered throughout", s)
	}
	if len(e.logs.Lines("circuit breaker open")) == 0 {
		t.Error("no log line for the breaker opening")
	}

	// While open, calls fail at once and nothing reaches the stream.
	before := e.echoQueueLen()
	for range 5 {
		checkBreakerRefusal(t, e.callWithTimeout(10*time.Second, "Echo", "x"), echoService, coolDown)
	}
	if after := e.echoQueueLen(); after != before {
		t.Errorf("the request stream went from %d to %d entries while the breaker was open", before, after)
	}

	// The server returns: a probe after the cool-down, or the client's
	// next refresh, finds it and the breaker closes.
	e.serveEchoAgain()
	waitFor(t, "a call to succeed again", func() bool {
		err := e.callWithTimeout(5*time.Second, "Echo", "x")
		if err != nil && !isBreakerRefusal(err) && !strings.Contains(err.Error(), "no live server") {
			t.Fatalf("call while the server returns: %v", err)
		}
		return err == nil
	})
	if s, _ := m.state(echoService); s != 0 {
		t.Errorf("breaker state after a successful probe = %d, want 0 (closed)", s)
	}
	tr := m.transitions(echoService)
	if tr["open"] < 1 || tr["closed"] < 1 {
		t.Errorf("transitions = %v; want open and closed at least once each", tr)
	}
	for i := range 5 {
		if _, err := e.call(context.Background(), "Echo", "x"); err != nil {
			t.Fatalf("call %d after the breaker closed: %v", i, err)
		}
	}
	if len(e.logs.Lines("circuit breaker closed")) == 0 {
		t.Error("no log line for the breaker closing")
	}
}

// Errors that the service answered with, and calls the caller cancelled or
// the client refused itself, do not open the breaker.
func TestBreakerIgnoresApplicationErrors(t *testing.T) {
	e, m := newBreakerEnv(t, tunnel.BreakerOptions{FailureThreshold: 2, CoolDown: time.Minute})
	for range 4 {
		if _, err := e.call(context.Background(), "Fail", "x"); tunnel.CodeOf(err) != tunnel.NotFound {
			t.Fatalf("Fail: %v", err)
		}
		if _, err := e.call(context.Background(), "Slow", "not a duration"); tunnel.CodeOf(err) != tunnel.InvalidArgument {
			t.Fatalf("Slow with a bad duration: %v", err)
		}
		if _, err := e.call(context.Background(), "Panic", "x"); tunnel.CodeOf(err) != tunnel.Internal {
			t.Fatalf("Panic: %v", err)
		}
		if _, err := e.call(context.Background(), "Nope", "x"); tunnel.CodeOf(err) != tunnel.Unimplemented {
			t.Fatalf("unknown method: %v", err)
		}
		// Refused by the client before sending (over MaxRequestBytes).
		if _, err := e.call(context.Background(), "Echo", strings.Repeat("x", tunnel.DefaultMaxMessageBytes+1)); tunnel.CodeOf(err) != tunnel.ResourceExhausted {
			t.Fatalf("oversized request: %v", err)
		}
		// Cancelled by the caller while the handler runs.
		ctx, cancel := context.WithCancel(context.Background())
		started := e.count("Slow")
		go func() {
			for e.count("Slow") == started {
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
		}()
		if _, err := e.call(ctx, "Slow", "10s"); tunnel.CodeOf(err) != tunnel.Canceled {
			t.Fatalf("cancelled call: %v", err)
		}
		cancel()
	}
	if s, ok := m.state(echoService); !ok || s != 0 {
		t.Errorf("breaker state = %d, %v; want 0 (closed)", s, ok)
	}
	if tr := m.transitions(echoService); len(tr) != 0 {
		t.Errorf("transitions = %v, want none", tr)
	}
	if got, err := e.call(context.Background(), "Echo", "x"); err != nil || got != "echo: x" {
		t.Fatalf("Echo: %q, %v", got, err)
	}
}

// Redis goes away: the Redis breaker opens and refuses unary calls and
// async enqueues at once, naming Redis; Redis returns: it closes.
func TestBreakerAroundRedis(t *testing.T) {
	const threshold = 3
	const coolDown = 300 * time.Millisecond
	e, m := newBreakerEnv(t, tunnel.BreakerOptions{FailureThreshold: threshold, CoolDown: coolDown})
	if _, err := e.call(context.Background(), "Echo", "x"); err != nil {
		t.Fatal(err)
	}

	e.redis.Kill()
	// Calls fail with UNAVAILABLE (or, now and then, run out their
	// deadline) until the Redis breaker opens. The service's breaker
	// counts the same failures and may refuse some calls first.
	var refusal error
	waitFor(t, "the Redis breaker to open", func() bool {
		err := e.callWithTimeout(5*time.Second, "Echo", "x")
		switch {
		case isBreakerRefusal(err) && strings.Contains(err.Error(), "Redis at"):
			refusal = err
			return true
		case tunnel.CodeOf(err) != tunnel.Unavailable && tunnel.CodeOf(err) != tunnel.DeadlineExceeded:
			t.Fatalf("call with Redis down: %v", err)
		}
		return false
	})
	t.Logf("refusal: %v", refusal)
	checkBreakerRefusal(t, refusal, "Redis at "+e.redis.Addr()+" unreachable: circuit open", coolDown)
	if s, _ := m.state("redis"); s != 2 {
		t.Errorf("Redis breaker state = %d, want 2 (open)", s)
	}
	// Async requests involve Redis only, and its breaker refuses them
	// too. (Once the cool-down has passed one is let through as a probe;
	// it fails and the breaker opens again.)
	waitFor(t, "the Redis breaker to refuse an async request", func() bool {
		_, err := e.client.Enqueue(context.Background(), &jobsDo, wrapperspb.String("x"))
		if tunnel.CodeOf(err) != tunnel.Unavailable {
			t.Fatalf("Enqueue with Redis down: %v", err)
		}
		return isBreakerRefusal(err) && strings.Contains(err.Error(), "Redis at")
	})

	e.redis.Restart(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := e.callWithTimeout(5*time.Second, "Echo", "x")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no call succeeded within 30s of Redis returning; last: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s, _ := m.state("redis"); s != 0 {
		t.Errorf("Redis breaker state after Redis returned = %d, want 0 (closed)", s)
	}
	tr := m.transitions("redis")
	if tr["open"] < 1 || tr["half_open"] < 1 || tr["closed"] < 1 {
		t.Errorf("Redis breaker transitions = %v; want open, half_open and closed at least once each", tr)
	}
	// The unary call's connection works; the enqueue may take one go-redis
	// still dials afresh (its pool keeps refusing dials for a moment after
	// failed ones), so it gets what a caller would do with "not queued:
	// safe to retry": another try, until the same deadline.
	for {
		_, err := e.client.Enqueue(context.Background(), &jobsDo, wrapperspb.String("y"))
		if err == nil {
			break
		}
		if tunnel.CodeOf(err) != tunnel.Unavailable || !strings.Contains(err.Error(), "safe to retry") || time.Now().After(deadline) {
			t.Fatalf("Enqueue after Redis returned: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// With the breakers disabled every call is tried.
func TestBreakerDisabled(t *testing.T) {
	e, m := newBreakerEnv(t, tunnel.BreakerOptions{Disabled: true, FailureThreshold: 1})
	e.stopServerAndWait()
	for i := range 10 {
		err := e.callWithTimeout(300*time.Millisecond, "Echo", "x")
		if isBreakerRefusal(err) {
			t.Fatalf("call %d refused by a disabled breaker: %v", i, err)
		}
		if tunnel.CodeOf(err) != tunnel.Unavailable && tunnel.CodeOf(err) != tunnel.DeadlineExceeded {
			t.Fatalf("call %d with no server: %v", i, err)
		}
	}
	if _, ok := m.state(echoService); ok {
		t.Error("a disabled breaker exports a state")
	}
}
