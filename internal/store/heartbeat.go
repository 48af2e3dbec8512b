package store

import (
	"fmt"
	"strconv"
	"time"
)

// heartbeatScript records that a worker is alive, stamped with Redis's own
// clock so that liveness never depends on the hosts' clocks, forgets
// workers silent for longer than the prune age, and keeps the service's
// registry (the workers hash and, for a beat that names one, the schemas
// hash) for the retention time after this beat. A beat that names a
// schema version also says whether the schemas hash still holds it, so
// that a worker republishes a schema Redis lost.
//
//	KEYS[1] workers hash        KEYS[2] shard count key (optional)
//	KEYS[3] schemas hash (optional, with KEYS[2])
//	ARGV[1] worker id           ARGV[2] worker record (JSON object)
//	ARGV[3] prune age in ms     ARGV[4] retention in ms
//	ARGV[5] schema version (with KEYS[3])
//
// Returns {seconds, microseconds, schema missing (1|0), fast (1|0),
// shard count}: Redis's TIME, whether the schema must be published
// again, whether every worker the hash keeps (this one included)
// announces async_fast_path (wire.Worker.AsyncFastPath), and the value at
// the shard count key (empty when absent or not asked), so that a beat of a
// service's shard 0 is the one command a second a server needs per
// service.
var heartbeatScript = newOOMScript("heartbeat", `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local info = cjson.decode(ARGV[2])
info['beat_ms'] = now
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(info))
local all = redis.call('HGETALL', KEYS[1])
local fast = 1
for i = 1, #all, 2 do
  local beat = beat_ms(all[i + 1])
  if not beat or now - beat > tonumber(ARGV[3]) then
    redis.call('HDEL', KEYS[1], all[i])
  elseif not string.find(all[i + 1], '"async_fast_path":true', 1, true) then
    fast = 0
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local missing = 0
if KEYS[3] then
  if redis.call('HEXISTS', KEYS[3], ARGV[5]) == 0 then
    missing = 1
  else
    redis.call('PEXPIRE', KEYS[3], ARGV[4])
  end
end
local shards = ''
if KEYS[2] then
  local v = redis.pcall('GET', KEYS[2])
  if type(v) == 'string' then shards = v end -- absent, or not a string: one shard
end
return {t[1], t[2], missing, fast, shards}
`)

// Heartbeat stamps a worker's record in one workers hash with Redis's
// time, and forgets the workers of the hash silent for long.
type Heartbeat struct {
	Call
}

// NewHeartbeat beats worker, whose record (wire.Worker as JSON, without
// its beat time) is record, into workers, forgetting workers silent for
// longer than prune and keeping the hash for retention. With shardCount
// (the service's ShardCount key, for a beat of its shard 0) it also reads
// the recorded shard count; with schemas and a schema version as well, it
// keeps schemas and checks that it holds the version.
func NewHeartbeat(workers, worker string, record []byte, prune, retention time.Duration, shardCount, schemas, schema string) *Heartbeat {
	keys := []string{workers}
	args := []any{worker, record, prune.Milliseconds(), retention.Milliseconds()}
	if shardCount != "" {
		keys = append(keys, shardCount)
		if schemas != "" && schema != "" {
			keys = append(keys, schemas)
			args = append(args, schema)
		}
	}
	return &Heartbeat{Call: Call{script: heartbeatScript, keys: keys, args: args}}
}

// Beat is what a heartbeat found.
type Beat struct {
	// At is Redis's time at the beat.
	At time.Time
	// SchemaMissing: the schema version the beat named is missing from
	// the schemas hash.
	SchemaMissing bool
	// AllFastPath: every worker of the hash announces AsyncFastPath in
	// its record (wire.Worker), so none would take over a request that
	// ran on the fast path as one that never ran.
	AllFastPath bool
	// ShardCount is the service's recorded shard count as stored ("" for
	// none, or when the beat did not ask); ParseShardCount reads it.
	ShardCount string
}

// Result returns what the beat found.
func (h *Heartbeat) Result() (Beat, error) {
	reply, err := h.reply()
	if err != nil {
		return Beat{}, err
	}
	parts, ok := reply.([]any)
	if !ok || len(parts) != 5 {
		return Beat{}, fmt.Errorf("script heartbeat: unexpected reply %v", reply)
	}
	at, err := ParseTime(parts[:2])
	missing, _ := parts[2].(int64)
	fast, _ := parts[3].(int64)
	shards, _ := parts[4].(string)
	return Beat{At: at, SchemaMissing: missing == 1, AllFastPath: fast == 1, ShardCount: shards}, err
}

// ParseTime reads Redis's TIME reply, {seconds, microseconds}, as a script
// returns it.
func ParseTime(v any) (time.Time, error) {
	parts, ok := v.([]any)
	if !ok || len(parts) != 2 {
		return time.Time{}, fmt.Errorf("not a TIME reply: %v", v)
	}
	var n [2]int64
	for i, p := range parts {
		var err error
		switch p := p.(type) {
		case string:
			n[i], err = strconv.ParseInt(p, 10, 64)
		case int64:
			n[i] = p
		default:
			err = fmt.Errorf("%T", p)
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("not a TIME reply: %v", v)
		}
	}
	return time.Unix(n[0], n[1]*1000), nil
}
