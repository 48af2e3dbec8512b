package tunnel

import "github.com/redis/go-redis/v9"

// All Lua that rpr runs lives in this file. Every script touches only keys
// of one service, which share a hash tag, so each runs in one Cluster slot.
// Scripts are called with EVALSHA; on NOSCRIPT (after a Redis restart or
// failover) the caller falls back to EVAL, which also reloads the script.

// completeScript answers a request and retires its stream entry in one step,
// so the entry is acknowledged only once the response is written.
//
//	KEYS[1] request stream      KEYS[2] caller's response stream
//	ARGV[1] consumer group      ARGV[2] request entry id
//	ARGV[3] response envelope
//
// Returns 1 when the response was written, 0 when the response stream no
// longer exists (the caller is gone; the response is dropped rather than
// creating a stream nobody reads or expires).
var completeScript = redis.NewScript(`
local written = redis.call('XADD', KEYS[2], 'NOMKSTREAM', '*', 'e', ARGV[3])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
if written then return 1 end
return 0
`)

// discardScript retires a request entry that will not be answered (its
// deadline passed before a worker took it).
//
//	KEYS[1] request stream
//	ARGV[1] consumer group      ARGV[2] request entry id
var discardScript = redis.NewScript(`
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
`)

// deadLetterScript moves an entry that cannot be processed (malformed
// envelope) to the dead-letter stream with the reason, then retires it.
//
//	KEYS[1] request stream      KEYS[2] dead-letter stream
//	ARGV[1] consumer group      ARGV[2] request entry id
//	ARGV[3] raw entry payload   ARGV[4] reason
//	ARGV[5] dead-letter stream cap (approximate MAXLEN)
var deadLetterScript = redis.NewScript(`
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*',
  'e', ARGV[3], 'reason', ARGV[4], 'entry', ARGV[2])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
`)

// heartbeatScript records that a worker is alive, stamped with Redis's own
// clock so that liveness never depends on the hosts' clocks, and forgets
// workers silent for longer than the prune age.
//
//	KEYS[1] workers hash
//	ARGV[1] worker id           ARGV[2] worker info (JSON object)
//	ARGV[3] prune age in ms
//
// Returns Redis's TIME reply {seconds, microseconds}.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local info = cjson.decode(ARGV[2])
info['beat_ms'] = now
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(info))
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local ok, w = pcall(cjson.decode, all[i + 1])
  if not ok or type(w) ~= 'table' or type(w['beat_ms']) ~= 'number'
      or now - w['beat_ms'] > tonumber(ARGV[3]) then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
return t
`)

// allScripts lists every script, for preloading.
var allScripts = []*redis.Script{completeScript, discardScript, deadLetterScript, heartbeatScript}
