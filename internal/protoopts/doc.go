// Package protoopts reads and checks rpr's proto options,
// (rpr.v1.service) and (rpr.v1.method) from proto/rpr/v1/options.proto,
// together with the standard options rpr honours (idempotency_level,
// deprecated).
//
// protoc-gen-rpr and tunnel.MethodDescFor both read options through it,
// so generated code and dynamic callers such as `rpr call` agree on what a
// .proto file means, and the plugin does not import the runtime. It
// returns plain values; its errors name the service or method and the
// option, so a caller only adds its own prefix.
package protoopts
