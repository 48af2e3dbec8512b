package tunnel

import "strings"

// DefaultPrefix starts every key rpr writes. Change it (ClientOptions and
// ServerOptions.Prefix) to run several independent rpr deployments on one
// Redis.
const DefaultPrefix = "rpr:v1:"

// workersGroup is the consumer group servers read request streams with.
const workersGroup = "workers"

// keyspace names every Redis key rpr uses; no other file builds key names.
// All keys of one service share the hash tag {service}, so a Lua script or
// pipeline touching several of them stays in one Redis Cluster slot.
type keyspace struct {
	prefix string
}

// tag returns the prefix and hash tag of a service's keys: "rpr:v1:{svc}".
func (k keyspace) tag(service string) string {
	return k.prefix + "{" + service + "}"
}

// requests is the service's request stream, read by the workers group.
func (k keyspace) requests(service string) string { return k.tag(service) + ":req" }

// responses is one client instance's response stream for a service.
func (k keyspace) responses(service, clientID string) string {
	return k.tag(service) + ":resp:" + clientID
}

// isResponses reports whether key is a response stream of service; servers
// write only to such keys, whatever an envelope asks for.
func (k keyspace) isResponses(service, key string) bool {
	rest, ok := strings.CutPrefix(key, k.tag(service)+":resp:")
	return ok && rest != "" && !strings.ContainsAny(rest, "{}")
}

// state is the state-machine hash of one request (see scripts.go): named by
// the request id for unary calls and by the idempotency key for async ones
// (which is the request id unless the caller chose a key).
func (k keyspace) state(service, requestID string) string {
	return k.tag(service) + ":st:" + requestID
}

// retries is the service's sorted set of async requests waiting for a
// retry or a scheduled time; the score is when (Redis unix ms).
func (k keyspace) retries(service string) string { return k.tag(service) + ":retry" }

// deadLetters is the service's dead-letter stream.
func (k keyspace) deadLetters(service string) string { return k.tag(service) + ":dlq" }

// cancels is the Pub/Sub channel on which clients announce the ids of
// calls their callers cancelled, so servers can stop those handlers.
func (k keyspace) cancels(service string) string { return k.tag(service) + ":cancel" }

// workers is the hash of worker heartbeats: worker id -> JSON info.
func (k keyspace) workers(service string) string { return k.tag(service) + ":workers" }

// schema is the service's published FileDescriptorSet (see registry.go).
func (k keyspace) schema(service string) string { return k.tag(service) + ":schema" }

// limits is the service's hash of rate-limit rules: rule name -> JSON rule
// (see limiter.go).
func (k keyspace) limits(service string) string { return k.tag(service) + ":limits" }

// rateKey is the state of one rate limit for one caller: key is
// "<rule>:<caller key>". A sorted set (sliding log) or a string (GCRA).
func (k keyspace) rateKey(service, key string) string { return k.tag(service) + ":rl:" + key }
