package tunnel

import (
	"strconv"
	"strings"
)

// DefaultPrefix starts every key rpr writes. Change it (ClientOptions and
// ServerOptions.Prefix) to run several independent rpr deployments on one
// Redis.
const DefaultPrefix = "rpr:v1:"

// workersGroup is the consumer group servers read request streams with.
const workersGroup = "workers"

// DefaultLane is the name of the lane a server joins when it names none
// (ServerOptions.Lane) and calls go to when no route says otherwise. Its
// request stream has no lane suffix: rpr:v1:{S}:req.
const DefaultLane = "default"

// laneOrDefault names a lane: "" (in options, in records that predate
// lanes) is the default lane.
func laneOrDefault(lane string) string {
	if lane == "" {
		return DefaultLane
	}
	return lane
}

// keyspace names every Redis key rpr uses; no other file builds key names.
//
// Every key lives under a hash tag, so that each Lua script and multi-key
// pipeline stays in one Redis Cluster slot:
//
//   - service-wide keys (routes, limits, schema, shard count) use the
//     service's own tag, {S};
//   - the keys of one shard (request and retry queues of every lane,
//     request states, response streams, dead letters, worker beats) use
//     the shard's tag: {S} for shard 0 and {S#k} for shard k > 0.
//
// Shard 0 sharing the service's tag means an unsharded service is simply
// shard 0 of one, so sharding a service later strands nothing it queued.
type keyspace struct {
	prefix string
}

// tag returns the prefix and hash tag of a service's service-wide keys,
// which is also the tag of its shard 0: "rpr:v1:{svc}".
func (k keyspace) tag(service string) string {
	return k.prefix + "{" + service + "}"
}

// shard returns the keys of one shard of a service.
func (k keyspace) shard(service string, shard int) shardKeys {
	if shard == 0 {
		return shardKeys{tag: k.tag(service)}
	}
	return shardKeys{tag: k.prefix + "{" + service + "#" + strconv.Itoa(shard) + "}"}
}

// shardKeys names the keys of one shard of a service; they share one hash
// tag, so one script may touch any of them together.
type shardKeys struct {
	tag string // "rpr:v1:{svc}" or "rpr:v1:{svc#k}"
}

// requests is a lane's request stream, read by the workers group:
// ":req" for the default lane, ":req:<lane>" for the others.
func (s shardKeys) requests(lane string) string {
	if lane == "" || lane == DefaultLane {
		return s.tag + ":req"
	}
	return s.tag + ":req:" + lane
}

// retries is a lane's sorted set of async requests waiting for a retry or
// a scheduled time; the score is when (Redis unix ms).
func (s shardKeys) retries(lane string) string {
	if lane == "" || lane == DefaultLane {
		return s.tag + ":retry"
	}
	return s.tag + ":retry:" + lane
}

// responses is one client instance's response stream for the shard.
func (s shardKeys) responses(clientID string) string { return s.tag + ":resp:" + clientID }

// isResponses reports whether key is a response stream of this shard;
// servers write only to such keys, whatever an envelope asks for.
func (s shardKeys) isResponses(key string) bool {
	rest, ok := strings.CutPrefix(key, s.tag+":resp:")
	return ok && rest != "" && !strings.ContainsAny(rest, "{}")
}

// state is the state-machine hash of one request (see scripts.go): named by
// the request id for unary calls and by the idempotency key for async ones
// (which is the request id unless the caller chose a key).
func (s shardKeys) state(requestID string) string { return s.tag + ":st:" + requestID }

// deadLetters is the shard's dead-letter stream (all lanes).
func (s shardKeys) deadLetters() string { return s.tag + ":dlq" }

// workers is the shard's hash of worker heartbeats: worker id -> JSON
// info. Servers beat into shard 0's hash (liveness, `rpr ls`) and into
// that of every shard they read, where beginScript looks a request's
// previous worker up.
func (s shardKeys) workers() string { return s.tag + ":workers" }

// workers is the service's hash of worker heartbeats (shard 0's).
func (k keyspace) workers(service string) string { return k.shard(service, 0).workers() }

// cancels is the Pub/Sub channel on which clients announce the ids of
// calls their callers cancelled, so servers can stop those handlers.
func (k keyspace) cancels(service string) string { return k.tag(service) + ":cancel" }

// schema is the service's published FileDescriptorSet (see registry.go).
func (k keyspace) schema(service string) string { return k.tag(service) + ":schema" }

// limits is the service's hash of rate-limit rules: rule name -> JSON rule
// (see limiter.go).
func (k keyspace) limits(service string) string { return k.tag(service) + ":limits" }

// rateKey is the state of one rate limit for one caller: key is
// "<rule>:<caller key>". A sorted set (sliding log) or a string (GCRA).
func (k keyspace) rateKey(service, key string) string { return k.tag(service) + ":rl:" + key }

// routes is the service's routing table: method pattern -> JSON rules
// (see routes.go).
func (k keyspace) routes(service string) string { return k.tag(service) + ":routes" }

// routesChanged is the Pub/Sub channel on which a change of the service's
// routing table is announced, so clients reload it at once.
func (k keyspace) routesChanged(service string) string { return k.tag(service) + ":routes:changed" }

// shardCount is the service's registered number of shards, a decimal
// string (see shards.go); absent means one.
func (k keyspace) shardCount(service string) string { return k.tag(service) + ":shards" }
