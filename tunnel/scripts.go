package tunnel

import "github.com/redis/go-redis/v9"

// All Lua that rpr runs lives in this file. Every script touches only keys
// of one service, which share a hash tag, so each runs in one Cluster slot.
// Scripts are called with EVALSHA; on NOSCRIPT (after a Redis restart or
// failover) the caller falls back to EVAL, which also reloads the script.

// The request state machine lives in the hash rpr:v1:{S}:st:<request-id>:
//
//	state    PROCESSING | SUCCESS | FAILED | TIMEOUT | CANCELLED | DEAD
//	worker   the worker that runs (or ran) the request
//	entry    the request stream entry being run
//	lease    Redis time (ms) until which the worker's claim holds
//	attempt  the client's attempt number being run
//	resp     the final response envelope (SUCCESS and FAILED)
//	claimed_ms, done_ms, marked_ms  Redis times of the transitions, and
//	previous_worker when a request was taken over (for `rpr trace`)
//
// A worker moves absent -> PROCESSING (beginScript) -> SUCCESS | FAILED
// (completeScript); a client whose deadline passes or whose caller cancels
// moves absent -> TIMEOUT | CANCELLED (arbiterScript). An async request's
// hash is named by its idempotency key and records the key's outcome: a
// failed attempt leaves FAILED until its retry claims it again, the last
// one leaves DEAD (dead-lettered; a new request with the key may run).
// Whichever gets to the absent state first wins: that is what makes "not
// executed" provable. All times are Redis's own (TIME), so host clocks
// never decide.
//
// The unary fast path: a unary request delivered to a worker for the first
// time, within its deadline, has no state hash while it runs. Its delivery
// (the entry in the stream's pending list, under the worker's name) is its
// claim, and answerScript writes the answer, acknowledges and deletes the
// entry in one step. The stream then arbitrates (arbiterScript): an entry
// not yet delivered is deleted and provably not executed, a pending one may
// be running, a missing one has finished. Takeovers, marks and requests
// whose deadline passed in the queue still use the hash.

// beginScript decides, for a batch of request entries a worker has just
// received (read or reclaimed), which ones it may run, in one round trip.
//
//	KEYS[1]      request stream              KEYS[2] workers hash
//	KEYS[2k+1]   state hash of entry k       KEYS[2k+2] its reply stream
//	             (async entries: any key of the service; never written)
//	ARGV[1] consumer group   ARGV[2] worker id   ARGV[3] lease ms
//	ARGV[4] state margin ms (kept past the deadline)
//	ARGV[5] silence ms after which a worker without a heartbeat is dead
//	ARGV[6k..6k+5] entry k: entry id, deadline (ms), idempotent (1|0),
//	                 attempt, has a caller waiting for a reply (1|0),
//	                 the worker it was taken over from ('' when read afresh)
//
// A unary entry taken over without a state hash ran on the fast path (see
// above) under a worker that is gone, which may have executed it: it is
// rerun when idempotent and answered "outcome unknown" (orphan) otherwise,
// with that worker as the detail.
//
// A request PROCESSING under another worker is taken over only when that
// worker is gone: its lease on the request expired and it has not beaten
// for ARGV[5] ms. (A PROCESSING request under this very worker id is from
// an earlier life of it: the caller never passes requests it still runs.)
//
// Returns one {decision, detail} per entry:
//
//	run        claimed PROCESSING for this worker: run the handler
//	rerun      idempotent, its worker is gone: run again (detail: that worker)
//	orphan     not idempotent (or past its deadline), its worker is gone:
//	           claimed for this worker, answer ABORTED (detail: that worker)
//	busy       another worker holds it and is alive: leave it alone
//	duplicate  another entry with this request id is running: entry retired
//	resent     already finished: stored response sent again, entry retired
//	finished   async, its key already SUCCESS (or this attempt already
//	           FAILED): entry retired, not run again
//	closed     the client gave up first (TIMEOUT/CANCELLED): entry retired
//	expired    the deadline passed in the queue: marked TIMEOUT, entry retired
var beginScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stream, workers, group, worker = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local lease, margin, silence = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local function gone(owner, leaseUntil)
  if tonumber(leaseUntil or '0') > now then return false end
  if owner == worker then return true end
  local raw = redis.call('HGET', workers, owner)
  if not raw then return true end
  local ok, w = pcall(cjson.decode, raw)
  if not ok or type(w) ~= 'table' or type(w['beat_ms']) ~= 'number' then return true end
  return now - w['beat_ms'] > silence
end
local out = {}
for k = 1, (#KEYS - 2) / 2 do
  local st, reply = KEYS[2 * k + 1], KEYS[2 * k + 2]
  local entry, deadline = ARGV[6 * k], tonumber(ARGV[6 * k + 1])
  local idempotent, attempt = ARGV[6 * k + 2] == '1', tonumber(ARGV[6 * k + 3])
  local replies, takenFrom = ARGV[6 * k + 4] == '1', ARGV[6 * k + 5]
  local ttl = math.max(deadline - now, 0) + margin
  local function retire()
    redis.call('XACK', stream, group, entry)
    redis.call('XDEL', stream, entry)
  end
  local function claim()
    redis.call('HSET', st, 'state', 'PROCESSING', 'worker', worker, 'entry', entry,
      'lease', now + lease, 'attempt', attempt, 'claimed_ms', now)
    redis.call('PEXPIRE', st, ttl)
  end
  local cur = redis.call('HMGET', st, 'state', 'worker', 'entry', 'lease', 'attempt', 'resp')
  local state, owner = cur[1], cur[2]
  if state == 'DEAD' then state = nil end
  if not state then
    if now >= deadline then
      redis.call('HSET', st, 'state', 'TIMEOUT', 'marked_ms', now)
      redis.call('PEXPIRE', st, margin)
      retire()
      out[k] = {'expired', ''}
    elseif takenFrom ~= '' and replies then
      -- a fast-path unary request whose worker is gone: it may have run
      claim()
      redis.call('HSET', st, 'previous_worker', takenFrom)
      if idempotent then out[k] = {'rerun', takenFrom} else out[k] = {'orphan', takenFrom} end
    else
      claim()
      out[k] = {'run', ''}
    end
  elseif state == 'TIMEOUT' or state == 'CANCELLED' then
    retire()
    out[k] = {'closed', state}
  elseif state == 'SUCCESS' or (state == 'FAILED' and attempt <= tonumber(cur[5] or '0')) then
    retire()
    if replies then
      if cur[6] then
        redis.call('XADD', reply, 'NOMKSTREAM', '*', 'e', cur[6])
      end
      out[k] = {'resent', state}
    else
      out[k] = {'finished', state}
    end
  elseif state == 'FAILED' then
    -- a client retry (higher attempt) of a call that failed
    claim()
    out[k] = {'run', ''}
  elseif cur[3] ~= entry then
    -- PROCESSING from another entry: a client retry of a running call
    retire()
    out[k] = {'duplicate', owner}
  elseif not gone(owner, cur[4]) then
    out[k] = {'busy', owner}
  elseif idempotent and now < deadline then
    claim()
    redis.call('HSET', st, 'previous_worker', owner)
    out[k] = {'rerun', owner}
  else
    redis.call('HSET', st, 'worker', worker, 'lease', now + lease, 'previous_worker', owner)
    out[k] = {'orphan', owner}
  end
end
return out
`)

// completeScript finishes a batch of requests of one service: for each it
// records the final state and acts on the outcome, then acknowledges and
// removes all their entries at once, so an entry is acknowledged only
// together with its outcome. One call covers many completions, which
// spreads the cost of running a script. Each completion is fenced: a worker
// that no longer holds the request (it was taken over) writes nothing for
// it. The actions:
//
//	reply  unary: write the response to the caller's stream (NOMKSTREAM)
//	done   async success: only the state (the key's done marker)
//	retry  async failure with attempts left: put the next attempt's
//	       envelope in the retry set, due after the backoff
//	dead   async failure without: add the original envelope to the
//	       dead-letter stream with the fields given; state DEAD
//
//	KEYS[1] request stream
//	KEYS[2k] target of request k (reply stream | retry set | dead-letter
//	         stream; done: any key of the service)   KEYS[2k+1] its state hash
//	ARGV[1] consumer group   ARGV[2] worker id
//	ARGV[7k-4..7k+2] request k: entry id, action, final state, state TTL ms,
//	         response envelope (stored in the state; '' for none),
//	         envelope to retry or dead-letter, and for retry the backoff ms,
//	         for dead a JSON array of field/value pairs for the entry
//
// Returns one result per request: 1 when done, 0 when the reply stream no
// longer exists (the caller is gone; nothing is created for it), -1 when
// this worker lost the request (fenced).
var completeScript = redis.NewScript(`
local now -- Redis time (ms), read once and only when a state needs it
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
local out, done = {}, {}
for k = 1, (#KEYS - 1) / 2 do
  local target, st = KEYS[2 * k], KEYS[2 * k + 1]
  local a = 7 * k - 5
  local entry, action, final, ttl = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local resp, env, extra = ARGV[a + 5], ARGV[a + 6], ARGV[a + 7]
  local cur = redis.call('HMGET', st, 'state', 'worker', 'attempt')
  if cur[1] ~= 'PROCESSING' or cur[2] ~= ARGV[2] then
    out[k] = -1
  else
    if action == 'done' then
      -- The done marker is kept for the idempotency window (a day by
      -- default), so it keeps only what rpr trace shows: not the claim's
      -- details nor an earlier attempt's error (which would also have made
      -- the hash a large one).
      redis.call('DEL', st)
      redis.call('HSET', st, 'state', final, 'done_ms', clock(), 'worker', ARGV[2], 'attempt', cur[3])
    elseif resp ~= '' then
      redis.call('HSET', st, 'state', final, 'done_ms', clock(), 'lease', 0, 'resp', resp)
    else
      redis.call('HSET', st, 'state', final, 'done_ms', clock(), 'lease', 0)
    end
    redis.call('PEXPIRE', st, ttl)
    out[k] = 1
    if action == 'reply' then
      if not redis.call('XADD', target, 'NOMKSTREAM', '*', 'e', resp) then out[k] = 0 end
    elseif action == 'retry' then
      redis.call('ZADD', target, clock() + tonumber(extra), env)
    elseif action == 'dead' then
      local fields = cjson.decode(extra)
      redis.call('XADD', target, '*', 'e', env, 'entry', entry, 'failed_ms', clock(), unpack(fields))
    end
    done[#done + 1] = entry
  end
end
if #done > 0 then
  redis.call('XACK', KEYS[1], ARGV[1], unpack(done))
  redis.call('XDEL', KEYS[1], unpack(done))
end
return out
`)

// answerScript finishes a batch of unary requests on the fast path (see
// above): for each it writes the response to the caller's stream
// (NOMKSTREAM: nothing is created for a caller that is gone), then
// acknowledges and removes all their entries at once. There is no state to
// record and no fence: a worker that lost a request to a takeover still
// answers truthfully, and the caller takes the first answer. Its ARGV is
// two values per request rather than completeScript's seven, which is
// most of what a completion costs Redis.
//
//	KEYS[1] request stream   KEYS[1+k] reply stream of request k
//	ARGV[1] consumer group   ARGV[2k] entry id of request k
//	ARGV[2k+1] its response envelope
//
// Returns one result per request: 1 when written, 0 when the reply stream
// no longer exists.
var answerScript = redis.NewScript(`
local out, done = {}, {}
for k = 1, #KEYS - 1 do
  out[k] = 1
  if not redis.call('XADD', KEYS[k + 1], 'NOMKSTREAM', '*', 'e', ARGV[2 * k + 1]) then out[k] = 0 end
  done[k] = ARGV[2 * k]
end
redis.call('XACK', KEYS[1], ARGV[1], unpack(done))
redis.call('XDEL', KEYS[1], unpack(done))
return out
`)

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
// worker, or state gone). A request this worker has just completed is not
// lost: its completion may land between the caller's snapshot and this.
var extendScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
    local cur = redis.call('HMGET', KEYS[i], 'state', 'worker', 'entry')
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

// arbiterScript is the client's side of the arbiter: when a call's deadline
// passes or its caller cancels, it settles whether the request ran.
//
// A request with a state hash (a mark, or one a worker took over) is
// settled by it: the mark wins only over an absent state. Otherwise, for a
// request sent on the fast path (see above) whose entry id the client
// knows, the request stream decides: an entry still there and not
// delivered to any worker is deleted, so it never runs, and marked; a
// delivered one (pending) may be running, so it is marked (a worker that
// has not begun it yet skips it) and, if the caller cancelled, the servers
// are told so its handler is cancelled; no entry at all means it finished.
// Without an entry id (the send's reply was lost) nothing can be proved.
//
//	KEYS[1] state hash   KEYS[2] request stream
//	ARGV[1] TIMEOUT | CANCELLED   ARGV[2] TTL ms
//	ARGV[3] cancel channel        ARGV[4] request id
//	ARGV[5] entry id, '' when unknown   ARGV[6] consumer group
//
// Returns {1, ARGV[1]} when the request will never run, or {0, what}:
// the state found, 'DELIVERED', 'FINISHED', or 'UNKNOWN'.
var arbiterScript = redis.NewScript(`
local st, stream, mark, entry = KEYS[1], KEYS[2], ARGV[1], ARGV[5]
local function stamp()
  local t = redis.call('TIME')
  redis.call('HSET', st, 'marked_ms', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  redis.call('PEXPIRE', st, ARGV[2])
end
local state = redis.call('HGET', st, 'state')
if state then
  if state == 'PROCESSING' and mark == 'CANCELLED' then
    redis.call('PUBLISH', ARGV[3], ARGV[4])
  end
  return {0, state}
end
if entry == '' then return {0, 'UNKNOWN'} end
if #redis.call('XPENDING', stream, ARGV[6], entry, entry, 1) > 0 then
  redis.call('HSET', st, 'state', mark)
  stamp()
  if mark == 'CANCELLED' then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
  return {0, 'DELIVERED'}
end
if #redis.call('XRANGE', stream, entry, entry) > 0 then
  redis.call('XDEL', stream, entry)
  redis.call('HSET', st, 'state', mark)
  stamp()
  return {1, mark}
end
return {0, 'FINISHED'}
`)

// replyScript answers a caller whose request could not even be decoded
// (so it has no state), without creating a stream for a departed caller.
//
//	KEYS[1] caller's response stream
//	ARGV[1] response envelope
var replyScript = redis.NewScript(`
if redis.call('XADD', KEYS[1], 'NOMKSTREAM', '*', 'e', ARGV[1]) then return 1 end
return 0
`)

// deadLetterScript moves an entry that cannot be processed (malformed
// envelope) to the dead-letter stream with the reason, then retires it.
// The dead-letter stream is never trimmed by rpr: what lands there stays
// until an operator replays or drops it (`rpr dlq`).
//
//	KEYS[1] request stream      KEYS[2] dead-letter stream
//	ARGV[1] consumer group      ARGV[2] request entry id
//	ARGV[3] raw entry payload   ARGV[4] reason
//	ARGV[5] status code name    ARGV[6] worker id
//	ARGV[7] the lane the entry was queued in
var deadLetterScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('XADD', KEYS[2], '*', 'e', ARGV[3], 'entry', ARGV[2], 'failed_ms', now,
  'reason', ARGV[4], 'code', ARGV[5], 'worker', ARGV[6], 'lane', ARGV[7])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
`)

// enqueueScript puts a batch of async requests of one service in its
// queue, each unless the queue is at its cap: a request that would pass
// the cap is refused, and nothing already queued is touched. A request due
// later goes to the retry set instead of the stream.
//
//	KEYS[1] request stream   KEYS[2] retry set
//	ARGV[3k-2..3k] request k: cap (entries in the stream plus the retry
//	               set), due time (Redis unix ms; 0 for at once), envelope
//
// Returns {queued_1, backlog_1, queued_2, backlog_2, ...}: queued is 1 or
// 0 (refused), backlog the queue's length after that request.
var enqueueScript = redis.NewScript(`
local backlog = redis.call('XLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2])
local out = {}
for k = 1, #ARGV / 3 do
  local cap, due, env = tonumber(ARGV[3 * k - 2]), tonumber(ARGV[3 * k - 1]), ARGV[3 * k]
  if backlog >= cap then
    out[2 * k - 1] = 0
  else
    if due > 0 then
      redis.call('ZADD', KEYS[2], due, env)
    else
      redis.call('XADD', KEYS[1], '*', 'e', env)
    end
    backlog = backlog + 1
    out[2 * k - 1] = 1
  end
  out[2 * k] = backlog
end
return out
`)

// moveDueScript moves async requests whose time has come (retries after
// their backoff, delayed calls) from the retry set to the request stream.
// Each is added to the stream and removed from the set in the same script,
// so a crash can neither lose nor duplicate one, and several servers may
// run it at once.
//
//	KEYS[1] retry set   KEYS[2] request stream
//	ARGV[1] most entries to move in one run
//
// Returns {moved, ms until the next entry is due (-1 when none is left)}.
var moveDueScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, env in ipairs(due) do
  redis.call('XADD', KEYS[2], '*', 'e', env)
end
if #due > 0 then redis.call('ZREM', KEYS[1], unpack(due)) end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #nxt == 0 then return {#due, -1} end
return {#due, math.max(tonumber(nxt[2]) - now, 0)}
`)

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
var janitorScript = redis.NewScript(`
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

// replayScript moves dead letters back to the request stream, each in one
// step: the entry is removed from the dead-letter stream only as its
// request is queued again. A dead letter whose idempotency key has since
// succeeded is removed without being queued (running it again would break
// the key's at-most-once promise).
//
//	KEYS[1] dead-letter stream   KEYS[2] request stream
//	KEYS[2+k] state hash of dead letter k (by its idempotency key)
//	ARGV[2k-1] entry id of dead letter k   ARGV[2k] the envelope to queue
//
// Returns one result per dead letter: 'replayed', 'succeeded' (dropped,
// its key already succeeded) or 'gone' (no such dead letter any more).
var replayScript = redis.NewScript(`
local out = {}
for k = 1, #KEYS - 2 do
  local entry, env = ARGV[2 * k - 1], ARGV[2 * k]
  if #redis.call('XRANGE', KEYS[1], entry, entry) == 0 then
    out[k] = 'gone'
  elseif redis.call('HGET', KEYS[2 + k], 'state') == 'SUCCESS' then
    redis.call('XDEL', KEYS[1], entry)
    out[k] = 'succeeded'
  else
    redis.call('XADD', KEYS[2], '*', 'e', env)
    redis.call('XDEL', KEYS[1], entry)
    out[k] = 'replayed'
  end
end
return out
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
var allScripts = []*redis.Script{beginScript, completeScript, extendScript, arbiterScript, replyScript, deadLetterScript, heartbeatScript,
	enqueueScript, moveDueScript, janitorScript, replayScript, limitScript, raiseShardsScript, moveLaneScript}

// limitScript decides whether one call may go under the rate-limit rules
// that apply to it (see limiter.go), all at once and on Redis's clock: the
// call is admitted only when every rule admits it, and only then counted
// against each. Times are Redis microseconds.
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
var limitScript = redis.NewScript(`
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

// raiseShardsScript records a service's shard count, never lowering it:
// servers and clients configured for more shards raise it as they start,
// so that no one sends to a shard nobody reads (lowering is
// SetShardCount's, which first checks that nothing would be stranded).
//
//	KEYS[1] shard count key   ARGV[1] the caller's shard count
//
// Returns the count in force afterwards (absent counts as 1).
var raiseShardsScript = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '1') or 1
local n = tonumber(ARGV[1])
if n > cur then
  redis.call('SET', KEYS[1], n)
  return n
end
return cur
`)

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
var moveLaneScript = redis.NewScript(`
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
