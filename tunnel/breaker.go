package tunnel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Circuit breakers fail calls at once while the far side cannot serve
// them, instead of letting each one find out the slow way (a round trip to
// Redis, a wait in the queue until the deadline). A Client keeps one breaker
// per service it calls and one around Redis itself, shared by all its
// services. Each is CLOSED (calls pass), OPEN (calls fail at once with
// UNAVAILABLE, not executed, naming what is down and when the next probe
// is, with a RetryInfo detail) or HALF_OPEN (a few probe calls pass; their
// success closes it, a failure opens it again). The state machine is
// sony/gobreaker's, in its two-step form: Allow before the request is sent,
// done once its outcome is known.
//
// What counts (see serviceOutcome and redisOutcome): a breaker counts only
// outcomes that say something about what it guards. The far side answering,
// even with an error (NOT_FOUND, INTERNAL from a handler, ...), is a
// success for the service's breaker. Calls the caller cancelled, and calls
// this client refused before sending (admission, size limits), are
// excluded: they are neither successes nor failures.

// Breaker defaults; see BreakerOptions.
const (
	DefaultBreakerFailureThreshold = 5
	DefaultBreakerCoolDown         = 5 * time.Second
	DefaultBreakerHalfOpenProbes   = 1
)

// BreakerOptions configure a Client's circuit breakers: one per service it
// calls, and one around Redis shared by all of them. The zero value turns
// them on with the defaults.
type BreakerOptions struct {
	// FailureThreshold is how many consecutive failures open a breaker
	// (default 5). For a service, failures are outcomes that say it is not
	// serving: UNAVAILABLE because no server is live or Redis cannot be
	// reached, and DEADLINE_EXCEEDED for a request that was not executed
	// (nobody took it in time). For Redis, failures are errors talking to
	// it (connection refused, timeouts, LOADING, ...).
	FailureThreshold int
	// CoolDown is how long an open breaker fails calls at once before it
	// lets probe calls through (default 5s). A service's breaker that
	// opened on calls that found no live server closes sooner: at the
	// client's first look at the service (once a second) that finds one.
	CoolDown time.Duration
	// HalfOpenProbes is how many probe calls a half-open breaker lets
	// through at once, and how many successes in a row close it; one
	// failure opens it again for another CoolDown (default 1).
	HalfOpenProbes int
	// Disabled turns the breakers off: every call is tried.
	Disabled bool
}

func (o BreakerOptions) withDefaults() BreakerOptions {
	if o.FailureThreshold <= 0 {
		o.FailureThreshold = DefaultBreakerFailureThreshold
	}
	if o.CoolDown <= 0 {
		o.CoolDown = DefaultBreakerCoolDown
	}
	if o.HalfOpenProbes <= 0 {
		o.HalfOpenProbes = DefaultBreakerHalfOpenProbes
	}
	return o
}

// Breaker metric names.
const (
	metricBreakerState       = "rpr.client.breaker.state"
	metricBreakerTransitions = "rpr.client.breaker.transitions"
)

// redisBreakerName is the rpc.service attribute of the Redis breaker.
const redisBreakerName = "redis"

// breakerStateValue is what the state gauge reports for each state.
func breakerStateValue(s gobreaker.State) int64 {
	switch s {
	case gobreaker.StateHalfOpen:
		return 1
	case gobreaker.StateOpen:
		return 2
	}
	return 0
}

func breakerStateName(s gobreaker.State) string {
	switch s {
	case gobreaker.StateHalfOpen:
		return "half_open"
	case gobreaker.StateOpen:
		return "open"
	}
	return "closed"
}

// breakers are a Client's circuit breakers. A nil *breakers (Disabled)
// allows everything.
type breakers struct {
	opts        BreakerOptions
	log         *slog.Logger
	state       metric.Int64Gauge
	transitions metric.Int64Counter

	redis *breaker

	mu       sync.Mutex // held while a service's breaker is made
	services sync.Map   // service name → *breaker
}

// newBreakers makes a Client's breakers, or nil when they are disabled.
// log is the client's logger; rdb only names Redis in messages.
func newBreakers(opts BreakerOptions, rdb redis.UniversalClient, mp metric.MeterProvider, log *slog.Logger) (*breakers, error) {
	if opts.Disabled {
		return nil, nil
	}
	meter := meterOf(mp)
	state, err1 := meter.Int64Gauge(metricBreakerState,
		metric.WithDescription("Circuit breaker state, by service (rpc.service=\"redis\" for the breaker around Redis): 0 closed, 1 half-open, 2 open."),
		metric.WithUnit("{state}"))
	transitions, err2 := meter.Int64Counter(metricBreakerTransitions,
		metric.WithDescription("Circuit breaker state changes, by service and the state entered (rpr.breaker.state)."),
		metric.WithUnit("{transition}"))
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	b := &breakers{
		opts:        opts.withDefaults(),
		log:         log,
		state:       state,
		transitions: transitions,
	}
	addr := redisAddr(rdb)
	b.redis = b.newBreaker(redisBreakerName, func(state string) string {
		return "Redis at " + addr + " unreachable: circuit " + state
	}, redisOutcome)
	return b, nil
}

// redisAddr names the Redis rdb talks to, for messages.
func redisAddr(rdb redis.UniversalClient) string {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	}
	return fmt.Sprintf("%T", rdb)
}

// breaker is one circuit breaker.
//
// Most calls meet a breaker that is closed with no failure since the last
// success. For them gobreaker's answer is known, and asking it costs two
// acquisitions of its mutex and a closure per call, the longest lock wait
// of a call under load. So while healthy is set, a call passes and a
// success is dropped without gobreaker; every other outcome, and every
// call while healthy is clear, goes through gobreaker under slow, which
// then sets healthy again from gobreaker's state and counts. The state
// machine and its counting stay gobreaker's.
type breaker struct {
	name string                    // service name, or "redis"
	what func(state string) string // starts a refusal's message: what is down
	set  *breakers
	// cb is gobreaker's circuit; a fresh one replaces it when a service
	// whose breaker opened for want of a live server has one again
	// (serverLive).
	cb       atomic.Pointer[gobreaker.TwoStepCircuitBreaker[struct{}]]
	classify func(error) outcome
	attrs    attribute.Set

	// healthy is set while cb is closed with no consecutive failure.
	healthy atomic.Bool
	// epoch counts cb's state changes: the outcome of a call let through
	// while healthy counts only in the state it was let through in, as
	// gobreaker ignores outcomes from an earlier generation.
	epoch atomic.Uint64
	slow  sync.Mutex // serializes reports to cb with the update of healthy

	mu       sync.Mutex
	lastErr  string    // message of the last failure
	noServer bool      // the last failure was for want of a live server
	reason   string    // why it last opened
	openedAt time.Time // when it last opened
}

// errExcluded is what gobreaker's done receives for an outcome the
// breaker ignores.
var errExcluded = errors.New("rpr: outcome excluded from the circuit breaker")

// errBreakerFailure is what gobreaker's done receives for a failure.
var errBreakerFailure = errors.New("rpr: circuit breaker failure")

func (b *breakers) newBreaker(name string, what func(state string) string, classify func(error) outcome) *breaker {
	br := &breaker{
		name:     name,
		what:     what,
		set:      b,
		classify: classify,
		attrs:    attribute.NewSet(attribute.String("rpc.service", name)),
	}
	br.cb.Store(br.newCircuit())
	br.healthy.Store(true)
	b.state.Record(context.Background(), 0, metric.WithAttributeSet(br.attrs))
	return br
}

// service returns the breaker of a service, making it on first use.
func (b *breakers) service(name string) *breaker {
	if br, ok := b.services.Load(name); ok {
		return br.(*breaker)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if br, ok := b.services.Load(name); ok {
		return br.(*breaker)
	}
	br := b.newBreaker(name, func(state string) string {
		return "circuit " + state + " for service " + name
	}, serviceOutcome)
	b.services.Store(name, br)
	return br
}

// breakerPass is one call's way through the breakers: done reports its
// outcome to each breaker that let it through. The zero value reports
// nothing.
type breakerPass struct {
	redis, service             *breaker
	redisTicket, serviceTicket ticket
}

// ticket is what one breaker gave a call it let through.
type ticket struct {
	done  func(error) // gobreaker's, or nil for a call let through while healthy
	epoch uint64      // the breaker's epoch when it let the call through
}

// allow lets a unary call to service through the Redis breaker and the
// service's, or returns the error of the first that refuses it. full and
// rid name the call in that error.
func (b *breakers) allow(service, full, rid string) (breakerPass, error) {
	if b == nil {
		return breakerPass{}, nil
	}
	pass, err := b.allowRedis(full, rid)
	if err != nil {
		return pass, err
	}
	br := b.service(service)
	t, err := br.allow()
	if err != nil {
		b.redis.settle(pass.redisTicket, outcomeExcluded) // not sent: Redis was not tried
		return breakerPass{}, br.refusal(err, full, rid)
	}
	pass.service, pass.serviceTicket = br, t
	return pass, nil
}

// allowRedis lets a call through the Redis breaker only: async requests
// involve no server until later, so only Redis can refuse them.
func (b *breakers) allowRedis(full, rid string) (breakerPass, error) {
	if b == nil {
		return breakerPass{}, nil
	}
	t, err := b.redis.allow()
	if err != nil {
		return breakerPass{}, b.redis.refusal(err, full, rid)
	}
	return breakerPass{redis: b.redis, redisTicket: t}, nil
}

// done reports a call's outcome (its final error, nil on success). It must
// be called exactly once for every pass allow returned.
func (p breakerPass) done(err error) {
	if p.redis != nil {
		p.redis.report(p.redisTicket, err)
	}
	if p.service != nil {
		p.service.report(p.serviceTicket, err)
	}
}

// outcome is what a call's end means to one breaker.
type outcome int

const (
	outcomeSuccess  outcome = iota // the guarded side answered
	outcomeFailure                 // the guarded side is not serving
	outcomeExcluded                // says nothing about the guarded side
)

// serviceOutcome classifies a unary call's end for its service's breaker.
func serviceOutcome(err error) outcome {
	if err == nil {
		return outcomeSuccess
	}
	e := toError(err)
	switch {
	case errors.Is(err, errNeverSent):
		return outcomeExcluded // its caller's time ran out before it was sent
	case e.code == Canceled:
		// Cancelled by its caller (or the client closed): excluded rather
		// than counted as a success, so that a cancelled half-open probe
		// frees its slot for another probe instead of closing the breaker.
		return outcomeExcluded
	case e.local && e.code == Unavailable:
		return outcomeFailure // no live server, or Redis unreachable
	case e.code == DeadlineExceeded && e.notExecuted:
		return outcomeFailure // nobody took the request before its deadline
	case e.local && e.notExecuted:
		return outcomeExcluded // refused by this client before sending
	}
	// The service answered, with a reply or an error of its own, or a
	// worker took the request.
	return outcomeSuccess
}

// redisOutcome classifies a call's end for the Redis breaker.
func redisOutcome(err error) outcome {
	if err == nil {
		return outcomeSuccess
	}
	e := toError(err)
	switch {
	case errors.Is(err, errNoLiveServer):
		return outcomeSuccess // Redis answered: the service has no worker
	case e.code == Canceled, e.code == DeadlineExceeded:
		// The caller's time ran out; whether Redis was slow or the queue
		// long is not known.
		return outcomeExcluded
	case e.local && e.code == Unavailable:
		return outcomeFailure // connection refused, i/o timeout, LOADING, ...
	case e.local && e.notExecuted:
		return outcomeExcluded // refused by this client before sending
	}
	return outcomeSuccess // an answer came back through Redis
}

// errNoLiveServer marks the UNAVAILABLE of a call to a service without a
// live server: a failure for the service's breaker, and a success for the
// Redis breaker (Redis answered).
var errNoLiveServer = errors.New("no live server")

// noLiveServer marks e as a call refused for want of a live server.
func noLiveServer(e *Error) *Error {
	e.cause = errNoLiveServer
	return e
}

// allow lets a call through, or returns gobreaker's reason for refusing it.
func (br *breaker) allow() (ticket, error) {
	epoch := br.epoch.Load()
	if br.healthy.Load() {
		return ticket{epoch: epoch}, nil
	}
	done, err := br.circuit().Allow()
	return ticket{done: done, epoch: epoch}, err
}

// report hands the outcome of err to the breaker, remembering a failure's
// message for the refusals that follow.
func (br *breaker) report(t ticket, err error) {
	o := br.classify(err)
	if o == outcomeFailure {
		br.mu.Lock()
		br.lastErr = toError(err).Message()
		br.noServer = errors.Is(err, errNoLiveServer)
		br.mu.Unlock()
	}
	br.settle(t, o)
}

// settle hands outcome o of a call let through with t to gobreaker, unless
// gobreaker's answer to it is known.
func (br *breaker) settle(t ticket, o outcome) {
	var result error // what gobreaker's done is given
	switch o {
	case outcomeSuccess:
		if t.done == nil && br.healthy.Load() {
			return // gobreaker would count it and change nothing
		}
	case outcomeExcluded:
		if t.done == nil {
			return
		}
		result = errExcluded
	default:
		result = errBreakerFailure
	}

	br.slow.Lock()
	defer br.slow.Unlock()
	done := t.done
	if done == nil {
		// Let through while healthy: its outcome counts only if the
		// breaker is still in the state that let it through.
		if br.epoch.Load() != t.epoch {
			return
		}
		var err error
		if done, err = br.circuit().Allow(); err != nil {
			return
		}
	}
	done(result)
	br.updateHealthy()
}

// changed logs and counts a state change. gobreaker calls it with its own
// lock held, so it must not call the breaker.
func (br *breaker) changed(from, to gobreaker.State) {
	br.epoch.Add(1)
	br.mu.Lock()
	if to == gobreaker.StateOpen {
		br.openedAt = time.Now()
		if from == gobreaker.StateHalfOpen {
			br.reason = "again: a probe call failed"
		} else {
			br.reason = fmt.Sprintf("after %d consecutive failures", br.set.opts.FailureThreshold)
		}
	}
	last := br.lastErr
	br.mu.Unlock()

	br.record(to)
	switch to {
	case gobreaker.StateOpen:
		br.set.log.Warn("rpr: circuit breaker open: failing calls at once",
			"service", br.name, "from", breakerStateName(from), "cool_down", br.set.opts.CoolDown, "last_error", last)
	case gobreaker.StateHalfOpen:
		br.set.log.Info("rpr: circuit breaker half-open: letting probe calls through",
			"service", br.name, "probes", br.set.opts.HalfOpenProbes)
	default:
		br.set.log.Info("rpr: circuit breaker closed: probe calls succeeded", "service", br.name)
	}
}

// record exports the breaker's entry into state to: the state gauge and
// the transitions counter.
func (br *breaker) record(to gobreaker.State) {
	ctx := context.Background()
	br.set.state.Record(ctx, breakerStateValue(to), metric.WithAttributeSet(br.attrs))
	br.set.transitions.Add(ctx, 1, metric.WithAttributes(
		attribute.String("rpc.service", br.name),
		attribute.String("rpr.breaker.state", breakerStateName(to))))
}

// refusal is the error of a call the breaker did not let through (err is
// gobreaker's reason): UNAVAILABLE, not executed, saying what is down and
// when the next probe is, with a RetryInfo detail of that delay.
func (br *breaker) refusal(err error, full, rid string) error {
	br.mu.Lock()
	reason, last, openedAt := br.reason, br.lastErr, br.openedAt
	br.mu.Unlock()
	opts := br.set.opts
	var e *Error
	var after time.Duration
	if errors.Is(err, gobreaker.ErrTooManyRequests) {
		// Half-open with every probe slot taken: their outcome decides.
		after = opts.CoolDown
		e = notExecutedf(Unavailable, "%s [%s]: %s, waiting for %d probe call(s) in flight (last failure: %s); not sent, retry in %v",
			full, rid, br.what("half-open"), opts.HalfOpenProbes, last, after)
	} else {
		after = max(0, time.Until(openedAt.Add(opts.CoolDown)))
		if after >= time.Second {
			after = after.Round(100 * time.Millisecond)
		} else {
			after = after.Round(time.Millisecond)
		}
		e = notExecutedf(Unavailable, "%s [%s]: %s %s (last: %s); not sent, next probe in %v",
			full, rid, br.what("open"), reason, last, after)
	}
	return withRefusal(e, ReasonCircuitOpen, after)
}
