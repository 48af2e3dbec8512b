// Package acl builds the Redis ACL users (Redis 7 selectors, %R~/%W~ key
// permissions, & channel permissions) that confine each rpr role to what
// it needs: a server of some services (ForServer), a caller of some
// services (ForCaller), and an operator of a whole deployment
// (ForOperator). The rules are a pure function of the key prefix, the
// service names and the options: nothing here talks to Redis. `rpr acl`
// prints them; a program that provisions Redis users can build the same
// with this package and send User.Args with ACL SETUSER.
//
//	u, err := acl.ForCaller([]string{"acme.orders.v1.Orders"}, acl.Options{ClientID: "shop-"})
//	fmt.Println(u.Command()) // ACL SETUSER rpr-caller-acme.orders.v1.Orders reset on >CHANGE-ME ...
//	err = rdb.Do(ctx, u.Args()...).Err()
//
// # What the roles may do
//
// Commands are granted per group of keys, each group in a selector of its
// own, so that a command is allowed only on the keys that need it (Redis
// checks a command against each selector in turn, and allows it when one
// permits the command and all its keys). Redis checks the commands a Lua
// script runs against the same rules (an XRANGE inside EVALSHA on a key
// the user may not read fails with "The user executing the script can't
// access at least one of the keys"), and EVALSHA and EVAL need read and
// write permission on every key they are given: so the scripts' keys sit
// in a selector that allows only EVALSHA and EVAL, and what the scripts
// do inside is bounded by the other selectors.
//
// A caller (a tunnel.Client, `rpr ingress`) may, for the services named:
// send requests (XADD to the request streams of every lane and shard,
// ZADD to their retry sets, XLEN and ZCARD for the backlog), withdraw a
// request it gave up on (XDEL) and ask whether a worker has it (XPENDING,
// which returns entry ids, worker ids, idle times and delivery counts,
// never an entry's contents); it never reads a request stream. It reads
// and marks request states (HGET, HSET, PEXPIRE on st:*), keeps its rate
// limit counters (rl:*), reads the workers, routes, limits and shard
// count (never writes them), writes frames to workers' inboxes (XADD
// only), owns its response streams (resp:<ClientID>*, every command the
// client reads them with), publishes cancels and subscribes to route
// changes. It runs INFO server and INFO replication, and no other
// section: their run_id and master_replid tell it whether Redis
// restarted or failed over while a call it gave up on waited, when the
// arbiter's "never ran" would not hold; they show the Redis process's
// version, ports and paths and its replicas' addresses, none of the
// data. It cannot read another service's keys, read or join the
// workers group, beat into the workers hash, or change routes, limits or
// the shard count.
//
// A server (a tunnel.Server) may do what serving needs on its services'
// queue keys (request streams and their group, retry sets, states,
// finished records, inboxes, dead letters, worker heartbeats, schemas, the
// shard count it raises) and write (XADD, never read) callers' response
// streams; it cannot read or change routes or limits, nor touch another
// service's keys.
//
// With Options.Upstreams (the tunnel's services: rpr ingress is their
// caller, rpr egress their server), either role also reads the services'
// upstream tables and their versions (HGETALL, GET, in MULTI/EXEC) and
// reports the version it forwards by (upstreams:applied); it cannot
// change the tables.
//
// An operator (the rpr CLI's ls, stats, dlq, routes, limits, shards,
// forget...) may use every non-dangerous command on every key and channel
// under the prefix, and INFO.
//
// Every role may run the connection commands (HELLO, AUTH, PING, SELECT,
// CLIENT SETNAME...; none of @dangerous), TIME, SCRIPT LOAD and CLUSTER
// SLOTS and CLUSTER INFO (how go-redis finds a Cluster's nodes, and how
// tunnel.Open tells a Cluster node from a standalone Redis: INFO is
// @dangerous and not granted). Redis does not replicate
// ACL users between Cluster nodes: create them on every node (or in each
// node's aclfile).
//
// # What the rules cannot narrow
//
// Redis grants keys by name pattern, and rpr's names carry no caller, so
// within a service a caller may still: XDEL any request entry whose id it
// guesses (ids are times; this withdraws a call, it reveals nothing),
// read and write the state hash of a request whose id or idempotency key
// it knows (mark it so that it never runs, or an async one finished),
// publish any id as a cancel, and count against another caller's rate
// limit. Callers' response streams are separated only when each caller's
// ClientOptions.ID starts with a prefix of its own (Options.ClientID).
// Caller identity and per-method authorization are the signed envelopes'
// job, not the ACL's.
package acl
