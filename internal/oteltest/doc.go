// Package oteltest holds the runtime's tests that read its telemetry
// through the OpenTelemetry SDK: call and batch metrics, spans across
// Redis, the circuit breakers' state, the in-flight bound's slot waits,
// the rate limiter's refusal counts, and benchmarks of what tracing and
// metrics cost. The package has no code of its own; everything lives in
// its tests, which use package tunnel through its public API only, as an
// application would.
//
// It is a module of its own (github.com/rprtunnel/rpr/internal/oteltest)
// because the runtime depends on the OpenTelemetry API only: users bring
// their own providers. Were these tests in the runtime's module, the SDK
// would be a requirement of github.com/rprtunnel/rpr and so appear in the
// module graph of every program that imports tunnel. Here it is a
// requirement of this module alone, which nothing imports. The go.work
// file at the repository root puts it in the workspace, so
//
//	go test ./internal/oteltest/...
//
// runs it from the root, against this checkout of the runtime (its go.mod
// also replaces github.com/rprtunnel/rpr with the checkout, for
// GOWORK=off).
//
// Every test starts its own redis-server through internal/redistest.
package oteltest
