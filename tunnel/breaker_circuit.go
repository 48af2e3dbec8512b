package tunnel

import "github.com/sony/gobreaker/v2"

// newCircuit makes a closed gobreaker circuit with br's settings. Its
// state changes reach br.changed only while it is br's circuit: one
// replaced by serverLive may still hear of calls it let through, and
// must not log or count what no longer guards anything.
func (br *breaker) newCircuit() *gobreaker.TwoStepCircuitBreaker[struct{}] {
	opts := br.set.opts
	threshold := uint32(opts.FailureThreshold)
	var cb *gobreaker.TwoStepCircuitBreaker[struct{}]
	cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        br.name,
		MaxRequests: uint32(opts.HalfOpenProbes),
		Timeout:     opts.CoolDown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= threshold },
		IsExcluded:  func(err error) bool { return err == errExcluded },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			if br.cb.Load() == cb {
				br.changed(from, to)
			}
		},
	})
	return cb
}

// circuit is br's gobreaker circuit.
func (br *breaker) circuit() *gobreaker.TwoStepCircuitBreaker[struct{}] { return br.cb.Load() }

// updateHealthy sets healthy from the circuit's state; br.slow is held.
func (br *breaker) updateHealthy() {
	cb := br.circuit()
	br.healthy.Store(cb.State() == gobreaker.StateClosed && cb.Counts().ConsecutiveFailures == 0)
}

// serviceLive tells the breaker of service that a refresh of its state
// just found a live server (see breaker.serverLive).
func (b *breakers) serviceLive(service string) {
	if b == nil {
		return
	}
	if br, ok := b.services.Load(service); ok {
		br.(*breaker).serverLive()
	}
}

// serverLive closes a service's breaker that is open (or counting
// failures) because calls found no live server, now that a refresh found
// one: waiting out the cool-down would refuse calls a live server could
// take, which turned a server restart, or a moment in which a client
// missed the beats, into CoolDown of refused calls. A breaker whose last
// failure was anything else (deadlines in the queue, Redis unreachable)
// keeps its course.
func (br *breaker) serverLive() {
	br.mu.Lock()
	noServer := br.noServer
	br.mu.Unlock()
	if !noServer || br.healthy.Load() {
		return
	}
	br.slow.Lock()
	defer br.slow.Unlock()
	old := br.circuit()
	was := old.State()
	if was == gobreaker.StateClosed && old.Counts().ConsecutiveFailures == 0 {
		return
	}
	br.mu.Lock()
	br.noServer = false
	br.mu.Unlock()
	br.cb.Store(br.newCircuit())
	br.epoch.Add(1) // what the old circuit let through while healthy counts nowhere
	br.healthy.Store(true)
	if was == gobreaker.StateClosed {
		return // it was only counting: nothing to log
	}
	br.record(gobreaker.StateClosed)
	br.set.log.Info("rpr: circuit breaker closed: a live server is back", "service", br.name, "was", breakerStateName(was))
}
