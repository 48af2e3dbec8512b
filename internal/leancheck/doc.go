// Package leancheck guards what importing the runtime costs a user: its
// tests fail when package tunnel links a module outside a short, fixed
// list (go-redis, protobuf, genproto's rpc status, the OpenTelemetry API,
// msgpack, gobreaker and what those need), links a package that serves a
// port or draws a terminal UI, or when a fresh module that imports only
// tunnel finds the CLI's or the test suites' dependencies (cobra,
// bubbletea, lipgloss, miniredis, progressbar, Prometheus, the
// OpenTelemetry SDK, goleak) in its module graph, or must raise its go
// directive above the runtime's.
//
// The package has no code of its own; the checks are tests, so that
// `go test ./...` (and so `make test`) runs them. They run the go command
// (skipped when it is not on PATH) with GOWORK=off, so they see the
// runtime's module as a user's build would, not the development
// workspace, and without network: the module cache already holds what the
// runtime's own build needed.
package leancheck
