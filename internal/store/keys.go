package store

import (
	"strconv"
	"strings"
)

// DefaultPrefix starts every key rpr writes; a deployment may choose
// another (ClientOptions.Prefix, ServerOptions.Prefix) to share one Redis
// with other rpr deployments.
const DefaultPrefix = "rpr:v1:"

// WorkersGroup is the consumer group servers read request streams with.
const WorkersGroup = "workers"

// ResponseGroup is the consumer group a client reads its response stream
// through.
const ResponseGroup = "client"

// DefaultLane is the lane whose request stream has no lane suffix.
const DefaultLane = "default"

// LaneOrDefault names a lane: "" (in options, in records that predate
// lanes) is the default lane.
func LaneOrDefault(lane string) string {
	if lane == "" {
		return DefaultLane
	}
	return lane
}

// MaxShards bounds a service's shard count.
const MaxShards = 64

// ParseShardCount reads a recorded shard count (GET's reply on
// ShardCount): absent, unreadable or out of range counts as one, the
// same for clients, servers and operators.
func ParseShardCount(raw string, err error) int {
	if err != nil {
		return 1
	}
	n, convErr := strconv.Atoi(raw)
	if convErr != nil || n < 1 || n > MaxShards {
		return 1
	}
	return n
}

// Keyspace names every Redis key rpr uses; no other package builds key
// names.
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
type Keyspace struct {
	prefix string
}

// NewKeyspace returns the keyspace under prefix; "" means DefaultPrefix.
func NewKeyspace(prefix string) Keyspace {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Keyspace{prefix: prefix}
}

// Prefix returns the prefix every key starts with.
func (k Keyspace) Prefix() string { return k.prefix }

// tag returns the prefix and hash tag of a service's service-wide keys,
// which is also the tag of its shard 0: "rpr:v1:{svc}".
func (k Keyspace) tag(service string) string {
	return k.prefix + "{" + service + "}"
}

// Shard returns the keys of one shard of a service.
func (k Keyspace) Shard(service string, shard int) Shard {
	if shard == 0 {
		return Shard{Tag: k.tag(service)}
	}
	return Shard{Tag: k.prefix + "{" + service + "#" + strconv.Itoa(shard) + "}"}
}

// Shards returns the keys of shards from to to-1 of service.
func (k Keyspace) Shards(service string, from, to int) []Shard {
	out := make([]Shard, 0, max(to-from, 0))
	for shard := from; shard < to; shard++ {
		out = append(out, k.Shard(service, shard))
	}
	return out
}

// OtherShards returns the shard whose key names are glob patterns that
// match the keys of every shard k > 0 of service (the hash tag {S#*}),
// for rules that must cover every shard a service may have (Redis ACL
// key patterns); Shard(service, 0) names shard 0's keys. The prefix and
// service name are used as they are, so they must hold no glob
// wildcards for the patterns to match exactly.
func (k Keyspace) OtherShards(service string) Shard {
	return Shard{Tag: k.prefix + "{" + service + "#*}"}
}

// Shard names the keys of one shard of a service; they share one hash
// tag, so one script may touch any of them together.
type Shard struct {
	Tag string // "rpr:v1:{svc}" or "rpr:v1:{svc#k}"
}

// Requests is a lane's request stream, read by WorkersGroup: ":req" for
// the default lane, ":req:<lane>" for the others.
func (s Shard) Requests(lane string) string {
	if lane == "" || lane == DefaultLane {
		return s.Tag + ":req"
	}
	return s.Tag + ":req:" + lane
}

// Retries is a lane's sorted set of async requests waiting for a retry or
// a scheduled time; the score is when (Redis unix ms).
func (s Shard) Retries(lane string) string {
	if lane == "" || lane == DefaultLane {
		return s.Tag + ":retry"
	}
	return s.Tag + ":retry:" + lane
}

// Responses is one client instance's response stream for the shard.
func (s Shard) Responses(clientID string) string { return s.Tag + ":resp:" + clientID }

// IsResponses reports whether key is a response stream of this shard;
// servers write only to such keys, whatever an envelope asks for.
func (s Shard) IsResponses(key string) bool {
	rest, ok := strings.CutPrefix(key, s.Tag+":resp:")
	return ok && rest != "" && !strings.ContainsAny(rest, "{}")
}

// Inbox is one worker's inbox in the shard: the stream the callers of the
// streaming calls it runs write their frames to, read through
// WorkersGroup by that worker alone.
func (s Shard) Inbox(worker string) string { return s.Tag + ":in:" + worker }

// State is the state-machine hash of one request: named by the request id
// for unary calls and by the idempotency key for async ones (which is the
// request id unless the caller chose a key).
func (s Shard) State(requestID string) string { return s.Tag + ":st:" + requestID }

// Done is the record kept of a finished request under its request id, a
// string holding a wire.Finished (JSON) with a TTL, for `rpr trace`: a
// unary call's outcome, written with its answer when its server keeps
// finished calls (ServerOptions.Retention), for that long; and, for an
// async request sent with an idempotency key of its own (its state hash
// is named by the key), the key, written with each outcome, for as long
// as the key's state. Requests whose state hash is named by their id
// (async requests with the default key, streams) have none.
func (s Shard) Done(requestID string) string { return s.Tag + ":done:" + requestID }

// LanePatterns are the SCAN MATCH patterns of the shard's request streams
// and retry sets of lanes other than the default; the lane is the key's
// last ":"-separated part.
func (s Shard) LanePatterns() []string {
	tag := globEscape(s.Tag)
	return []string{tag + ":req:*", tag + ":retry:*"}
}

// DeadLetters is the shard's dead-letter stream (all lanes).
func (s Shard) DeadLetters() string { return s.Tag + ":dlq" }

// Workers is the shard's hash of worker heartbeats: worker id -> JSON
// record (wire.Worker). Servers beat into shard 0's hash (liveness, `rpr
// ls`) and into that of every shard they read, where the begin script
// looks a request's previous worker up.
func (s Shard) Workers() string { return s.Tag + ":workers" }

// Workers is the service's hash of worker heartbeats (shard 0's).
func (k Keyspace) Workers(service string) string { return k.Shard(service, 0).Workers() }

// Cancels is the Pub/Sub channel on which clients announce the ids of
// calls their callers cancelled, so servers can stop those handlers.
func (k Keyspace) Cancels(service string) string { return k.tag(service) + ":cancel" }

// Handoffs is the Pub/Sub channel on which a worker tells another that it
// moved a request to it (wire.Handoff).
func (k Keyspace) Handoffs(service string) string { return k.tag(service) + ":handoff" }

// Schema is the service's FileDescriptorSet as the last server to start
// published it: what tools of releases before Schemas read.
func (k Keyspace) Schema(service string) string { return k.tag(service) + ":schema" }

// Schemas holds every version of the service's schema its workers were
// built with: wire.SchemaID -> FileDescriptorSet; each worker's record
// names its own (wire.Worker.Schema).
func (k Keyspace) Schemas(service string) string { return k.tag(service) + ":schemas" }

// Limits is the service's hash of rate-limit rules: rule name -> JSON rule
// (wire.LimitRule).
func (k Keyspace) Limits(service string) string { return k.tag(service) + ":limits" }

// RateKey is the state of one rate limit for one caller: key is
// "<rule>:<caller key>". A sorted set (sliding log) or a string (GCRA).
func (k Keyspace) RateKey(service, key string) string { return k.tag(service) + ":rl:" + key }

// Routes is the service's routing table: method pattern -> JSON rules
// (wire.RouteRule).
func (k Keyspace) Routes(service string) string { return k.tag(service) + ":routes" }

// Upstreams is a forwarding service's table of upstreams (rpr egress,
// rpr ingress): route name -> JSON route.
func (k Keyspace) Upstreams(service string) string { return k.tag(service) + ":upstreams" }

// UpstreamsVersion counts the changes of the service's upstream table, so
// that readers notice one with a GET.
func (k Keyspace) UpstreamsVersion(service string) string {
	return k.tag(service) + ":upstreams:version"
}

// UpstreamsApplied records, per worker, the version of the upstream table
// it forwards by: worker id -> version.
func (k Keyspace) UpstreamsApplied(service string) string {
	return k.tag(service) + ":upstreams:applied"
}

// RoutesChanged is the Pub/Sub channel on which a change of the service's
// routing table is announced, so clients reload it at once.
func (k Keyspace) RoutesChanged(service string) string { return k.tag(service) + ":routes:changed" }

// ShardCount is the service's recorded number of shards, a decimal
// string; absent means one.
func (k Keyspace) ShardCount(service string) string { return k.tag(service) + ":shards" }

// ServiceOf returns the service whose workers hash or schema key is key,
// for listing services by scanning the keyspace.
func (k Keyspace) ServiceOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, k.prefix+"{")
	if !ok {
		return "", false
	}
	name, _, ok := strings.Cut(rest, "}")
	// "svc#k" is shard k of svc, whose keys the service's own stand for.
	if !ok || name == "" || strings.ContainsAny(name, "{}#") {
		return "", false
	}
	if k.Workers(name) != key && k.Schema(name) != key && k.Schemas(name) != key {
		return "", false
	}
	return name, true
}

// KeysOf are the SCAN MATCH patterns of every key of a service, in all
// its shards.
func (k Keyspace) KeysOf(service string) []string {
	escaped := globEscape(k.prefix) + "{" + globEscape(service)
	return []string{escaped + "}:*", escaped + "#*}:*"}
}

// HoldsWork reports whether key is one of a service's keys that hold
// requests or dead letters (request streams, retry sets, dead-letter
// streams): what an operator removing a service must not lose unawares.
func (k Keyspace) HoldsWork(key string) bool {
	_, rest, ok := strings.Cut(key, "}:")
	if !ok {
		return false
	}
	return rest == "req" || strings.HasPrefix(rest, "req:") || rest == "retry" || strings.HasPrefix(rest, "retry:") || rest == "dlq"
}

// IsClientKey reports whether key belongs to a client of the service (a
// response stream), which expires by itself once the client is gone.
func (k Keyspace) IsClientKey(key string) bool {
	_, rest, _ := strings.Cut(key, "}:")
	return strings.HasPrefix(rest, "resp:")
}

// ServicePatterns are the SCAN MATCH patterns of the keys ServiceOf
// recognizes, with the prefix's wildcard characters escaped.
func (k Keyspace) ServicePatterns() []string {
	escaped := globEscape(k.prefix)
	return []string{
		escaped + strings.TrimPrefix(k.Workers("*"), k.prefix),
		escaped + strings.TrimPrefix(k.Schema("*"), k.prefix),
		escaped + strings.TrimPrefix(k.Schemas("*"), k.prefix),
	}
}

// globEscape escapes the characters Redis's MATCH treats as wildcards.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
