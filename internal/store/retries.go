package store

import "time"

// moveDueScript moves async requests whose time has come (retries after
// their backoff, delayed calls) from a retry set to its request stream.
// Each is added to the stream and removed from the set in the same
// script, so a crash can neither lose nor duplicate one, and several
// servers may run it at once.
//
//	KEYS[1] retry set   KEYS[2] request stream
//	ARGV[1] most entries to move in one run
//
// Returns {moved, ms until the next entry is due (-1 when none is left)}.
var moveDueScript = newOOMScript("move_due", `
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, env in ipairs(due) do
  redis.call('XADD', KEYS[2], '*', 'e', env)
end
if #due > 0 then redis.call('ZREM', KEYS[1], unpack(due)) end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #nxt == 0 then return {#due, -1} end
return {#due, math.max(tonumber(nxt[2]) - now, 0)}
`)

// MoveDue moves the due entries of one lane's retry set of a shard to its
// request stream.
type MoveDue struct {
	Call
}

// NewMoveDue moves at most batch due entries from retries to stream.
func NewMoveDue(retries, stream string, batch int) *MoveDue {
	return &MoveDue{Call: Call{script: moveDueScript, keys: []string{retries, stream}, args: []any{batch}}}
}

// Result returns how many entries moved and how long until the next one
// is due (negative when none is left).
func (m *MoveDue) Result() (moved int, next time.Duration, err error) {
	out, err := m.ints(2)
	if err != nil {
		return 0, 0, err
	}
	if out[1] < 0 {
		return int(out[0]), -1, nil
	}
	return int(out[0]), time.Duration(out[1]) * time.Millisecond, nil
}
