// Package admin is rpr's operator handle: one value, built from a Redis
// client and a key prefix, that reads and changes what a deployment keeps
// in Redis — its services and their schemas, queue figures, lanes, worker
// health, request traces, dead letters, routing tables, rate limits and
// shard counts — and registers the deployment's queue gauges on a
// MeterProvider for an exporter.
//
//	a := admin.New(rdb, admin.Options{})            // Prefix "" is tunnel.DefaultPrefix
//	names, err := a.Services(ctx)                   // services with a schema or a heartbeat
//	svc := a.Service("examples.greeter.v1.Greeter") // no I/O
//	lanes, err := svc.LaneStats(ctx)                // one ServiceStats per lane
//	letters, err := svc.DeadLetters().List(ctx, admin.DeadLetterFilter{}, 50)
//	err = svc.Routes().Set(ctx, svc.Name()+"/*", rules)
//
// The rpr command (rpr ls, stats, top, trace, dlq, routes, limits, shards,
// exporter) is built on this package and package tunnel only, so whatever
// the CLI shows, a program can read the same way.
//
// # Shape
//
// asynq's Inspector is the model. A Client holds the connection and the
// prefix, so no call repeats (ctx, rdb, prefix, service, ...); Service
// narrows it to one service without touching Redis, and what an operator
// edits as a collection gets a small type with the CLI's verbs
// (DeadLetters, Routes, Limits: List, Set, Remove...). Trace is on both:
// Client.Trace looks in every service, as a request id does not name its
// own, and Service.Trace in one. Routes and Limits expose their hash's Key
// for messages and redis-cli. The types an operator reads (ServiceStats,
// LaneStatus, Health, RequestTrace, DeadLetter, LimitRule, RouteRule...)
// are this package's own; where the protocol has a canonical form of a
// stored record, the type here has the same fields and is converted at the
// edge, so the stored encoding can evolve without changing this API.
//
// # Cost
//
// Everything here is for operators' tools, dashboards and exporters, never
// for a request's hot path: package tunnel needs none of it to serve or to
// call. Each method says what it costs. Most are one or two pipelined
// round trips per service (per shard for traces and dead-letter scans);
// Client.Services and Service.Lanes SCAN the keyspace (on every master of
// a Cluster), so call them per command or per minute, not per request.
// Nothing is cached between calls, so a tool always sees Redis as it is,
// except by RegisterMetrics, which reuses its service list for a short,
// documented time, as scrapes come every few seconds.
//
// Package admin/acl builds, without Redis, the ACL users that confine a
// server, a caller or an operator to what its role needs (rpr acl).
//
// Errors name what failed and start with "rpr:"; bad input (a lane, a
// rule, a dead-letter id) gets an error that shows what a good one looks
// like.
package admin
