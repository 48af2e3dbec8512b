package store

// moveLaneScript moves up to ARGV[2] queued requests of one lane to
// another lane of the same shard, as one step each: the entries no worker
// has taken yet (and, with ARGV[3] = 1, those taken by workers that are
// gone, which the target lane's workers then treat like reclaimed ones:
// the state hash decides whether they run again), then the lane's retry
// set. An entry is never in both lanes, nor in neither.
//
//	KEYS[1] source request stream   KEYS[2] target request stream
//	KEYS[3] source retry set        KEYS[4] target retry set
//	ARGV[1] consumer group   ARGV[2] most entries to move
//	ARGV[3] 1: move delivered-but-unacknowledged entries too
//
// Returns {moved stream entries, moved retry entries, entries left}.
var moveLaneScript = newScript("move_lane", `
local src, dst, group = KEYS[1], KEYS[2], ARGV[1]
local budget = tonumber(ARGV[2])
local moved, movedRetries = 0, 0
local delivered = '0-0'
local pending = {}
if redis.call('EXISTS', src) == 1 then
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', src)) do
    local info = {}
    for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
    if info['name'] == group then
      delivered = info['last-delivered-id']
      if ARGV[3] == '1' and info['pending'] > 0 then
        for _, p in ipairs(redis.call('XPENDING', src, group, '-', '+', budget)) do
          pending[#pending + 1] = p[1]
        end
      end
    end
  end
  local function move(entry)
    redis.call('XADD', dst, '*', unpack(entry[2]))
    redis.call('XACK', src, group, entry[1])
    redis.call('XDEL', src, entry[1])
    moved = moved + 1
  end
  for _, id in ipairs(pending) do
    for _, entry in ipairs(redis.call('XRANGE', src, id, id)) do move(entry) end
    if moved >= budget then break end
  end
  if moved < budget then
    for _, entry in ipairs(redis.call('XRANGE', src, '(' .. delivered, '+', 'COUNT', budget - moved)) do
      move(entry)
    end
  end
end
if moved < budget then
  local due = redis.call('ZRANGE', KEYS[3], 0, budget - moved - 1, 'WITHSCORES')
  for i = 1, #due, 2 do
    redis.call('ZADD', KEYS[4], due[i + 1], due[i])
    redis.call('ZREM', KEYS[3], due[i])
    movedRetries = movedRetries + 1
  end
end
return {moved, movedRetries, redis.call('XLEN', src) + redis.call('ZCARD', KEYS[3])}
`)

// MoveLane moves queued requests of one lane of a shard to another lane of
// the same shard.
type MoveLane struct {
	Call
}

// NewMoveLane moves up to batch requests from lane from to lane to of
// shard sk; with orphaned, also those delivered to workers that are gone.
func NewMoveLane(sk Shard, from, to string, batch int, orphaned bool) *MoveLane {
	return &MoveLane{Call: Call{script: moveLaneScript,
		keys: []string{sk.Requests(from), sk.Requests(to), sk.Retries(from), sk.Retries(to)},
		args: []any{WorkersGroup, batch, flag(orphaned)}}}
}

// Result returns how many stream entries and retry entries moved, and how
// many entries the lane still holds.
func (m *MoveLane) Result() (moved, movedRetries, left int64, err error) {
	out, err := m.ints(3)
	if err != nil {
		return 0, 0, 0, err
	}
	return out[0], out[1], out[2], nil
}
