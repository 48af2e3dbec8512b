package tunnel

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/metric/noop"
)

// The breaker's healthy fast path must keep gobreaker's counting: these
// tests drive one breaker with outcomes in the orders concurrent calls
// can report them and check the state gobreaker ends in. (No Redis is
// involved; rdb only names Redis in messages.)

func testBreaker(t *testing.T, coolDown time.Duration) *breaker {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := newBreakers(BreakerOptions{CoolDown: coolDown}, rdb, noop.NewMeterProvider(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return b.service("svc")
}

// errNoServer is a failure for a service's breaker.
var errNoServer error = noLiveServer(notExecutedf(Unavailable, "no live server"))

func mustAllow(t *testing.T, br *breaker) ticket {
	t.Helper()
	tk, err := br.allow()
	if err != nil {
		t.Fatalf("breaker refused a call in state %v: %v", br.circuit().State(), err)
	}
	return tk
}

func TestBreakerSuccessAfterFailureResetsCount(t *testing.T) {
	br := testBreaker(t, time.Hour)
	// Two calls let through while healthy; the first fails, then the
	// second succeeds: as with gobreaker alone, the success resets the
	// count of consecutive failures.
	a, b := mustAllow(t, br), mustAllow(t, br)
	br.report(a, errNoServer)
	if br.healthy.Load() {
		t.Fatal("healthy after a failure")
	}
	br.report(b, nil)
	if !br.healthy.Load() || br.circuit().Counts().ConsecutiveFailures != 0 {
		t.Fatalf("after a later success: healthy %v, consecutive failures %d; want healthy, 0",
			br.healthy.Load(), br.circuit().Counts().ConsecutiveFailures)
	}
	for range DefaultBreakerFailureThreshold - 1 {
		br.report(mustAllow(t, br), errNoServer)
	}
	if got := br.circuit().State(); got != gobreaker.StateClosed {
		t.Fatalf("state %v after %d failures; want closed", got, DefaultBreakerFailureThreshold-1)
	}
	br.report(mustAllow(t, br), errNoServer)
	if got := br.circuit().State(); got != gobreaker.StateOpen {
		t.Fatalf("state %v after %d consecutive failures; want open", got, DefaultBreakerFailureThreshold)
	}
	if _, err := br.allow(); err == nil {
		t.Fatal("an open breaker let a call through")
	}
}

func TestBreakerIgnoresOutcomesFromAnEarlierState(t *testing.T) {
	br := testBreaker(t, time.Millisecond)
	late := mustAllow(t, br) // let through while healthy, reports last
	for range DefaultBreakerFailureThreshold {
		br.report(mustAllow(t, br), errNoServer)
	}
	if got := br.circuit().State(); got != gobreaker.StateOpen {
		t.Fatalf("state %v; want open", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for br.circuit().State() != gobreaker.StateHalfOpen {
		if time.Now().After(deadline) {
			t.Fatal("breaker did not turn half-open after its cool-down")
		}
		time.Sleep(time.Millisecond)
	}
	probe := mustAllow(t, br)
	// The late failure belongs to the closed state: it must neither open
	// the half-open breaker again nor take the probe's place.
	br.report(late, errNoServer)
	if got := br.circuit().State(); got != gobreaker.StateHalfOpen {
		t.Fatalf("state %v after a failure let through before it opened; want half-open", got)
	}
	br.report(probe, nil)
	if got := br.circuit().State(); got != gobreaker.StateClosed || !br.healthy.Load() {
		t.Fatalf("after the probe succeeded: state %v, healthy %v; want closed, healthy", got, br.healthy.Load())
	}
}

func TestBreakerExcludedOutcomesCountNothing(t *testing.T) {
	br := testBreaker(t, time.Hour)
	for range DefaultBreakerFailureThreshold - 1 {
		br.report(mustAllow(t, br), errNoServer)
	}
	br.report(mustAllow(t, br), Errorf(Canceled, "cancelled by its caller"))
	br.report(mustAllow(t, br), errNoServer)
	if got := br.circuit().State(); got != gobreaker.StateOpen {
		t.Fatalf("state %v: a cancelled call between failures reset the count; want open", got)
	}
}

func TestBreakerRefusalByServiceIsNoSuccessForRedis(t *testing.T) {
	br := testBreaker(t, time.Millisecond)
	b := br.set
	redisDown := notExecutedf(Unavailable, "connection refused")
	for range DefaultBreakerFailureThreshold {
		br.report(mustAllow(t, br), errNoServer)
		b.redis.report(mustAllow(t, b.redis), redisDown)
	}
	deadline := time.Now().Add(10 * time.Second)
	for br.circuit().State() != gobreaker.StateHalfOpen || b.redis.circuit().State() != gobreaker.StateHalfOpen {
		if time.Now().After(deadline) {
			t.Fatal("breakers did not turn half-open after their cool-down")
		}
		time.Sleep(time.Millisecond)
	}
	probe := mustAllow(t, br) // the service's one probe slot
	// The Redis breaker lets this call through as its probe; the
	// service's refuses it. Redis was not tried: its breaker must stay
	// half-open, its probe slot free again.
	if _, err := b.allow("svc", "svc/M", "rid"); err == nil {
		t.Fatal("a half-open service breaker with its probe slot taken let a call through")
	}
	if got := b.redis.circuit().State(); got != gobreaker.StateHalfOpen {
		t.Fatalf("Redis breaker %v after a call the service's refused; want half-open (Redis was not tried)", got)
	}
	mustAllow(t, b.redis)
	br.report(probe, nil)
}

// TestBreakerClosesWhenAServerIsBack: a breaker opened by calls that found
// no live server closes as soon as a refresh finds one, not a cool-down
// later; one opened by other failures keeps its course; and what the
// replaced circuit still hears of changes nothing.
func TestBreakerClosesWhenAServerIsBack(t *testing.T) {
	br := testBreaker(t, time.Hour)
	lingering := mustAllow(t, br) // let through before the failures, reported after the reset
	for range DefaultBreakerFailureThreshold {
		br.report(mustAllow(t, br), errNoServer)
	}
	if _, err := br.allow(); err == nil {
		t.Fatal("an open breaker let a call through")
	}
	br.serverLive()
	if got := br.circuit().State(); got != gobreaker.StateClosed || !br.healthy.Load() {
		t.Fatalf("after a live server was found: state %v, healthy %v; want closed and healthy", got, br.healthy.Load())
	}
	mustAllow(t, br)
	br.report(lingering, errNoServer)
	if got := br.circuit().Counts().ConsecutiveFailures; got != 0 {
		t.Fatalf("a failure let through by the replaced circuit counted in the new one: %d consecutive failures", got)
	}

	timedOut := notExecutedf(DeadlineExceeded, "nobody took it in time")
	other := testBreaker(t, time.Hour)
	for range DefaultBreakerFailureThreshold {
		other.report(mustAllow(t, other), timedOut)
	}
	other.serverLive()
	if got := other.circuit().State(); got != gobreaker.StateOpen {
		t.Fatalf("a breaker opened by requests nobody took in time is %v after a live server was found; want open until its cool-down", got)
	}
}

// TestBreakerServerLiveDuringCalls: calls let through, reported and
// refused while refreshes replace the circuit keep the breaker's
// bookkeeping sound (run with -race): once failures stop and a server is
// found, the breaker is closed and healthy.
func TestBreakerServerLiveDuringCalls(t *testing.T) {
	br := testBreaker(t, time.Hour)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				tk, err := br.allow()
				if err != nil {
					continue // refused while open
				}
				if (w+i)%3 == 0 {
					br.report(tk, nil)
				} else {
					br.report(tk, errNoServer)
				}
			}
		})
	}
	wg.Go(func() {
		for range 500 {
			br.serverLive()
		}
	})
	wg.Wait()
	br.report(mustAllowEventually(t, br), errNoServer)
	br.serverLive()
	if got := br.circuit().State(); got != gobreaker.StateClosed || !br.healthy.Load() {
		t.Fatalf("after the calls and a last refresh that found a server: state %v, healthy %v; want closed and healthy", got, br.healthy.Load())
	}
}

// mustAllowEventually is mustAllow for a breaker that may be open: it
// closes it first the way a refresh that finds a server does.
func mustAllowEventually(t *testing.T, br *breaker) ticket {
	t.Helper()
	if tk, err := br.allow(); err == nil {
		return tk
	}
	br.serverLive()
	return mustAllow(t, br)
}
