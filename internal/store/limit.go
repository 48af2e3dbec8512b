package store

import (
	"time"
)

// limitScript decides whether one call may go under the rate-limit rules
// that apply to it, all at once and on Redis's clock: the call is admitted
// only when every rule admits it, and only then counted against each.
// Times are Redis microseconds.
//
//	KEYS[k]     state of rule k for this caller (a sorted set for 'log',
//	            a string for 'gcra'; a key of the other type, left by a
//	            rule whose algorithm changed, is started afresh)
//	ARGV[4k-3]  algorithm of rule k: 'log' | 'gcra'
//	ARGV[4k-2]  limit: calls per window      ARGV[4k-1] window (us)
//	ARGV[4k]    gcra: burst (1..limit); log: unused
//
// log: the set holds the times of the calls admitted in the window
// (now-window, now]; a call is admitted while it holds fewer than limit,
// and refused until the oldest entry that keeps it full leaves the window.
// gcra: the string holds the theoretical arrival time TAT; with interval
// T = ceil(window/limit) and tolerance (burst-1)*T, a call is admitted when
// now >= TAT - tolerance, and then TAT = max(TAT, now) + T; refused, it
// waits TAT - tolerance - now. Keys expire about a window after their
// last admitted call.
//
// Returns {admitted 1|0, retry after (us), k of the rule that refused
// (0 when admitted), Redis time (us)}.
var limitScript = newScript("limit", `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local stamp = t[1] .. string.format('%06d', tonumber(t[2]))
local wait, refusedBy, tats = 0, 0, {}
for k = 1, #KEYS do
  local key, algo = KEYS[k], ARGV[4 * k - 3]
  local limit, window = tonumber(ARGV[4 * k - 2]), tonumber(ARGV[4 * k - 1])
  local delay = 0
  if algo == 'log' then
    local r = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now - window))
    if type(r) == 'table' and r.err then redis.call('DEL', key) end
    local n = redis.call('ZCARD', key)
    if n >= limit then
      local oldest = redis.call('ZRANGE', key, n - limit, n - limit, 'WITHSCORES')
      delay = math.max(tonumber(oldest[2]) + window - now, 1)
    end
  else
    local interval = math.ceil(window / limit)
    local tolerance = (tonumber(ARGV[4 * k]) - 1) * interval
    local v = redis.pcall('GET', key)
    if type(v) == 'table' and v.err then redis.call('DEL', key); v = false end
    local tat = math.max(tonumber(v or '0') or 0, now)
    if now < tat - tolerance then
      delay = tat - tolerance - now
    else
      tats[k] = tat + interval
    end
  end
  if delay > wait then wait, refusedBy = delay, k end
end
if refusedBy > 0 then return {0, wait, refusedBy, now} end
for k = 1, #KEYS do
  local key, window = KEYS[k], tonumber(ARGV[4 * k - 1])
  if ARGV[4 * k - 3] == 'log' then
    local member, i = stamp, 0
    while redis.call('ZADD', key, 'NX', stamp, member) == 0 do
      i = i + 1
      member = stamp .. '-' .. i
    end
    redis.call('PEXPIRE', key, math.ceil(window / 1000))
  else
    redis.call('SET', key, string.format('%.0f', tats[k]), 'PX', math.max(math.ceil((tats[k] - now) / 1000), 1))
  end
end
return {1, 0, 0, now}
`)

// Limit decides whether one call may go under the rate-limit rules that
// apply to it, and counts it against each when it may.
type Limit struct {
	Call
}

// NewLimit starts a Limit; add the rules that apply with Add.
func NewLimit() *Limit { return &Limit{Call: Call{script: limitScript}} }

// Add adds a rule that applies to the call: its state key (Keyspace.RateKey)
// and its algorithm ("log" or "gcra"), limit, window and burst.
func (l *Limit) Add(key, algorithm string, limit int64, window time.Duration, burst int64) {
	l.keys = append(l.keys, key)
	l.args = append(l.args, algorithm, limit, window.Microseconds(), burst)
}

// Result returns whether the call was admitted and, if not, how long to
// wait and which rule (0-based, in the order added) refused it.
func (l *Limit) Result() (admitted bool, retryAfter time.Duration, refusedBy int, err error) {
	out, err := l.ints(4)
	if err != nil {
		return false, 0, 0, err
	}
	if out[0] == 1 {
		return true, 0, -1, nil
	}
	refusedBy = int(min(max(out[2], 1), int64(len(l.keys)))) - 1
	return false, time.Duration(out[1]) * time.Microsecond, refusedBy, nil
}
