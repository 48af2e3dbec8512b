package tunnel_test

import "time"

// The circuit breakers' tests read the breakers' state from their metrics
// through the OpenTelemetry SDK, which the runtime's module does not
// require: they are in module github.com/rprtunnel/rpr/internal/oteltest,
// with the other tests that need the SDK.

// stopServerAndWait stops the env's server and waits until Serve has returned
// (it removes its heartbeat on the way out).
func (e *env) stopServerAndWait() {
	e.t.Helper()
	e.stop()
	select {
	case err := <-e.served:
		e.served <- err // for the cleanup check
	case <-time.After(10 * time.Second):
		e.t.Fatal("Serve did not return after its context ended")
	}
}
