// Package store is rpr's side of Redis: the keyspace (Keyspace, Shard),
// the consumer group names, and every Lua script rpr runs, each in its own
// file beside the one typed builder that assembles its KEYS and ARGV
// (NewBegin, NewComplete, NewAnswer, NewExtend, NewArbiter, NewEnqueue,
// ...). No other package names a key or builds script arguments.
//
// A builder returns a value embedding Call; Run sends one or several calls
// (in one pipeline) and is the one place that falls back from EVALSHA to
// EVAL when Redis has lost a script (a restart or a failover), and each
// builder's Result reads the reply into Go values, checking its shape.
// Every script starts with a shared prelude (now_ms, now_us, beat_ms), so
// that reading Redis's clock or a worker's last beat is written once.
//
// Every script touches only keys of one hash tag, so each runs in one
// Redis Cluster slot; the package's tests run each against a real
// Cluster. The data the scripts read and write is described in package
// wire, whose documentation is the protocol.
package store
