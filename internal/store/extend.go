package store

import "time"

// extendScript renews the leases of the requests a worker is running and
// resets their idle time in the pending list, so that no reclaimer takes
// over a live handler.
//
//	KEYS[1] request stream   KEYS[2..] state hashes
//	ARGV[1] consumer group   ARGV[2] worker id   ARGV[3] lease ms
//	ARGV[2i] entry id of KEYS[i]   ARGV[2i+1] 'f' for a fast-path unary
//	         request (no state: the pending list says whose it is), else 's'
//
// Returns the entry ids this worker no longer holds (taken over by another
// worker, or state gone or overwritten by a foreign value). A request this worker has just completed is not
// lost: its completion may land between the caller's snapshot and this.
var extendScript = newOOMScript("extend", `
local now = now_ms()
local lost = {}
for i = 2, #KEYS do
  local entry, fast = ARGV[2 * i], ARGV[2 * i + 1] == 'f'
  if fast then
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], entry, entry, 1)
    if p[1] and p[1][2] == ARGV[2] then
      redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, entry, 'JUSTID')
    elseif p[1] then
      lost[#lost + 1] = entry -- taken over by another worker
    end -- not pending: it has just completed
  else
    local cur = redis.pcall('HMGET', KEYS[i], 'state', 'worker', 'entry')
    if wrong_type(cur) then cur = {} end -- a foreign value: not this worker's
    local mine = cur[2] == ARGV[2] and cur[3] == entry
    if mine and cur[1] == 'PROCESSING' then
      redis.call('HSET', KEYS[i], 'lease', now + tonumber(ARGV[3]))
      redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, entry, 'JUSTID')
    elseif not (cur[2] == ARGV[2] and (cur[1] == 'SUCCESS' or cur[1] == 'FAILED' or cur[1] == 'DEAD')) then
      -- (an async done marker no longer names the entry)
      lost[#lost + 1] = entry
    end
  end
end
return lost
`)

// Extend renews the leases of requests a worker runs from one request
// stream, in one script run.
type Extend struct {
	Call
}

// NewExtend starts an Extend for requests of stream run by worker, each
// renewed for lease.
func NewExtend(stream, worker string, lease time.Duration) *Extend {
	return &Extend{Call: Call{script: extendScript, keys: []string{stream},
		args: []any{WorkersGroup, worker, lease.Milliseconds()}}}
}

// Add adds a running request: the one in entry, with state hash state, or
// without one on the fast path ("" state).
func (e *Extend) Add(entryID, state string) {
	mode, key := "s", state
	if state == "" {
		mode, key = "f", e.keys[0] // no state hash; any key of the shard
	}
	e.keys = append(e.keys, key)
	e.args = append(e.args, entryID, mode)
}

// Result returns the entries this worker no longer holds.
func (e *Extend) Result() ([]string, error) { return e.strings(-1) }
