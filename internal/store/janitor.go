package store

import "time"

// janitorScript keeps a request stream tidy without ever losing a request.
// It trims the entries every consumer group has delivered and acknowledged:
// by MINID up to the oldest entry some group still has pending or has not
// delivered yet. (Completions already delete their entries, so this mostly
// frees what deletion leaves behind.) It does nothing to a stream without
// groups. It also forgets consumers (workers from earlier processes) idle
// for longer than ARGV[1] with nothing pending; one with pending entries is
// kept, since deleting it would orphan them.
//
//	KEYS[1] request stream
//	ARGV[1] idle ms after which an empty consumer is forgotten
//
// Returns {entries trimmed, consumers forgotten}.
var janitorScript = newOOMScript("janitor", `
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function less(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am < bm or (am == bm and as < bs)
end
local function fields(flat)
  local m = {}
  for i = 1, #flat, 2 do m[flat[i]] = flat[i + 1] end
  return m
end
local safe, forgotten = nil, 0
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local info = fields(g)
  local ms, seq = string.match(info['last-delivered-id'], '^(%d+)-(%d+)$')
  local candidate = ms .. '-' .. string.format('%d', tonumber(seq) + 1)
  if tonumber(info['pending']) > 0 then
    local p = redis.call('XPENDING', KEYS[1], info['name'])
    if p[2] and less(p[2], candidate) then candidate = p[2] end
  end
  if not safe or less(candidate, safe) then safe = candidate end
  for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], info['name'])) do
    local consumer = fields(c)
    if tonumber(consumer['pending']) == 0 and tonumber(consumer['idle']) > tonumber(ARGV[1]) then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], info['name'], consumer['name'])
      forgotten = forgotten + 1
    end
  end
end
if not safe then return {0, forgotten} end
return {redis.call('XTRIM', KEYS[1], 'MINID', safe), forgotten}
`)

// Janitor trims a request stream of what every group has finished with
// and forgets consumers idle for long with nothing pending.
type Janitor struct {
	Call
}

// NewJanitor tidies stream, forgetting empty consumers idle for longer
// than idle.
func NewJanitor(stream string, idle time.Duration) *Janitor {
	return &Janitor{Call: Call{script: janitorScript, keys: []string{stream}, args: []any{idle.Milliseconds()}}}
}

// Result returns how many entries were trimmed and consumers forgotten.
func (j *Janitor) Result() (trimmed, forgotten int64, err error) {
	out, err := j.ints(2)
	if err != nil {
		return 0, 0, err
	}
	return out[0], out[1], nil
}
