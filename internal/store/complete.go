package store

import (
	"encoding/json"
	"time"

	"github.com/rprtunnel/rpr/internal/wire"
)

// completeScript finishes a batch of claimed requests of one request
// stream: for each it records the final state and acts on the outcome,
// then acknowledges and removes all their entries at once, so an entry is
// acknowledged only together with its outcome. Each completion is fenced:
// a worker that no longer holds the request (it was taken over) writes
// nothing for it. See Completion for the actions.
//
// With the outcome it may record the request id in the state (StateID,
// for a state named by an idempotency key of the caller's) and write the
// request's finished record (wire.Finished) under its id, for `rpr trace`.
//
// A dead letter for a dead-letter stream at its cap (ARGV[3] entries; 0
// for none) is held instead, never dropped nor making room by trimming:
// the request goes back to the retry set (KEYS[2]) as its next attempt,
// due after the hold's backoff, its state FAILED with the letter's fields
// kept in the state's 'held' field (StateHeld). The begin script hands
// such a request back for dead-lettering, never to a handler, and its
// letter is written once the stream has room.
//
//	KEYS[1] request stream   KEYS[2] its retry set
//	KEYS[3k] target of request k (reply stream | retry set | dead-letter
//	         stream; done: its state hash again)   KEYS[3k+1] its state hash
//	KEYS[3k+2] its record key (Shard.Done; its state hash again for none)
//	ARGV[1] consumer group   ARGV[2] worker id   ARGV[3] dead-letter cap
//	ARGV[13k-9..13k+3] request k: entry id, action, final state, state TTL
//	         ms, response envelope (stored in the state; '' for none),
//	         envelope to retry or dead-letter, and for retry the backoff ms,
//	         for dead a JSON array of field/value pairs for the entry ('':
//	         the pairs held in the state); the request id to record in the
//	         state ('' for none), the finished record ('' for none) and its
//	         TTL ms; for dead the envelope to hold ('': written whatever
//	         the cap) and the hold's backoff ms; 1 when it ran on the
//	         fast path (no claim in its state: an absent state is this
//	         worker's), else 0
//
// Returns one result per request: 1 when done, 0 when the reply stream no
// longer exists (the caller is gone; nothing is created for it), 2 when
// its dead letter was held (the stream is at its cap), -1 when this worker
// lost the request (fenced), -2 when the reply-to key holds something
// other than a stream (the state is recorded, nothing is sent) and -3
// when the state key holds something other than a hash (nothing is
// written). Entries with -2 or -3 are left pending, for the caller to
// dead-letter; the other requests of the call complete all the same.
var completeScript = newOOMScript("complete", `
local now -- Redis time (ms), read once and only when a state needs it
local function clock()
  if not now then now = now_ms() end
  return now
end
local cap = tonumber(ARGV[3])
local out, done = {}, {}
for k = 1, (#KEYS - 2) / 3 do
  local target, st, rec = KEYS[3 * k], KEYS[3 * k + 1], KEYS[3 * k + 2]
  local a = 13 * k - 10
  local entry, action, final, ttl = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local resp, env, extra = ARGV[a + 5], ARGV[a + 6], ARGV[a + 7]
  local id, record, recordTTL = ARGV[a + 8], ARGV[a + 9], ARGV[a + 10]
  local cur = redis.pcall('HMGET', st, 'state', 'worker', 'attempt')
  local fast = ARGV[a + 13] == '1'
  if wrong_type(cur) then
    out[k] = -3
  elseif (cur[1] ~= 'PROCESSING' or cur[2] ~= ARGV[2]) and not (fast and not cur[1]) then
    out[k] = -1
  elseif action == 'dead' and cap > 0 and ARGV[a + 11] ~= '' and redis.call('XLEN', target) >= cap then
    if extra == '' then extra = redis.call('HGET', st, 'held') or '[]' end
    redis.call('HSET', st, 'state', 'FAILED', 'done_ms', clock(), 'lease', 0, 'held', extra)
    if resp ~= '' then redis.call('HSET', st, 'resp', resp) end
    redis.call('PEXPIRE', st, ttl)
    redis.call('ZADD', KEYS[2], clock() + tonumber(ARGV[a + 12]), ARGV[a + 11])
    out[k] = 2
    done[#done + 1] = entry
  else
    local fields
    if action == 'done' then
      -- The done marker is kept for the idempotency window (a day by
      -- default), so it keeps only what rpr trace shows: not the claim's
      -- details nor an earlier attempt's error (which would also have made
      -- the hash a large one).
      redis.call('DEL', st)
      fields = {'state', final, 'done_ms', clock(), 'worker', ARGV[2], 'attempt', cur[3] or 1}
    elseif resp ~= '' then
      fields = {'state', final, 'done_ms', clock(), 'lease', 0, 'resp', resp}
    else
      fields = {'state', final, 'done_ms', clock(), 'lease', 0}
    end
    if id ~= '' then
      fields[#fields + 1] = 'id'
      fields[#fields + 1] = id
    end
    if action == 'dead' then
      if extra == '' then extra = redis.call('HGET', st, 'held') or '[]' end
      redis.call('HDEL', st, 'held')
    end
    redis.call('HSET', st, unpack(fields))
    redis.call('PEXPIRE', st, ttl)
    if record ~= '' then redis.call('SET', rec, record, 'PX', recordTTL) end
    out[k] = 1
    if action == 'reply' then
      local r = redis.pcall('XADD', target, 'NOMKSTREAM', '*', 'e', resp)
      if wrong_type(r) then out[k] = -2 elseif not r then out[k] = 0 end
    elseif action == 'retry' then
      redis.call('ZADD', target, clock() + tonumber(extra), env)
    elseif action == 'dead' then
      local fields = cjson.decode(extra)
      redis.call('XADD', target, '*', 'e', env, 'entry', entry, 'failed_ms', clock(), unpack(fields))
    end
    if out[k] ~= -2 then done[#done + 1] = entry end
  end
end
retire_entries(KEYS[1], ARGV[1], done)
return out
`)

// Actions of a Completion.
const (
	// ActionReply: a unary request; write Response to Target, the caller's
	// stream (not creating it for a caller that is gone).
	ActionReply = "reply"
	// ActionDone: an async success; only the state (the idempotency key's
	// done marker).
	ActionDone = "done"
	// ActionRetry: an async failure with attempts left; put Envelope (the
	// next attempt) in Target, the retry set, due after Backoff.
	ActionRetry = "retry"
	// ActionDead: an async failure without; add Envelope (the original) to
	// Target, the dead-letter stream, with Letter's fields.
	ActionDead = "dead"
)

// Completion is the outcome of one request a worker claimed, to be
// written by Complete.
type Completion struct {
	Action  string // ActionReply, ActionDone, ActionRetry or ActionDead
	EntryID string
	State   string        // the request's state hash
	Final   string        // the state to record (wire.StateSuccess, ...)
	TTL     time.Duration // how long the state keeps the outcome
	// Response is the response envelope, kept in the state (and written
	// to the caller for ActionReply); nil for none.
	Response []byte
	// Target is the reply stream, retry set or dead-letter stream; unused
	// for ActionDone.
	Target string
	// Envelope is the request envelope to retry or dead-letter.
	Envelope []byte
	// Backoff is how long a retry waits (ActionRetry).
	Backoff time.Duration
	// Letter is what the dead-letter entry records (ActionDead).
	Letter wire.DeadLetter
	// LetterHeld: the letter is the one a hold kept in the state
	// (ActionDead of a request the begin script found held); Letter is
	// unused.
	LetterHeld bool
	// Hold is the envelope to put back in the retry set, due after
	// HoldBackoff, when the dead-letter stream is at its cap (ActionDead):
	// the request's next attempt, so that a server of a release without
	// holds runs it again rather than dropping it.
	Hold        []byte
	HoldBackoff time.Duration
	// ID is the request id, to record in the state (wire.StateID) when
	// the state is named by an idempotency key the caller chose; "" for
	// none.
	ID string
	// Record is the request's finished record (wire.Finished), written to
	// RecordKey (its Shard.Done key) for RecordTTL together with the
	// outcome; nil for none.
	Record    []byte
	RecordKey string
	RecordTTL time.Duration
	// Fast: the request ran on the fast path, without a claim in its
	// state (see BeginEntry.Fast), so no state is as good as this
	// worker's claim: a takeover would have written one.
	Fast bool
}

// Fenced is Complete's result for a request this worker lost to another
// (it wrote nothing); CallerGone for a reply whose caller's stream no
// longer exists; Held for a dead letter held back; Written for the rest. ReplyWrongType (Complete and
// Answer) is the result for a request whose reply-to key holds another
// kind of value than a stream, and StateWrongType (Complete) for one whose
// state key holds another kind than a hash: values something other than
// rpr wrote under its prefix. Nothing was sent for such a request and its
// entry is still pending: the caller dead-letters it.
const (
	StateWrongType = -3
	ReplyWrongType = -2
	Fenced         = -1
	CallerGone     = 0
	Written        = 1
	// Held is Complete's result for a dead letter held back because the
	// dead-letter stream is at its cap: the request is in the retry set
	// again, not run again, and dead-lettered once there is room.
	Held = 2
)

// Complete writes the outcomes of claimed requests of one request stream
// in one script run: the state, the action and the entries'
// acknowledgement together.
type Complete struct {
	Call
	n int
}

// NewComplete starts a Complete for requests of stream, whose retry set
// is retries, by worker; a dead-letter stream holding maxDeadLetters
// entries or more takes no more (0: no cap) and its letters are held (see
// Held). size is how many will be added.
func NewComplete(stream, retries, worker string, maxDeadLetters int64, size int) *Complete {
	c := &Complete{Call: Call{script: completeScript}}
	c.keys = append(make([]string, 0, 2+3*size), stream, retries)
	c.args = append(make([]any, 0, 3+13*size), WorkersGroup, worker, max(maxDeadLetters, 0))
	return c
}

// Add adds one outcome.
func (c *Complete) Add(comp *Completion) {
	target := comp.Target
	if comp.Action == ActionDone || target == "" {
		target = comp.State // not written; keeps the script in one slot
	}
	var extra string
	var hold []byte
	var holdBackoff int64
	switch comp.Action {
	case ActionRetry:
		extra = itoa(max(comp.Backoff.Milliseconds(), 1))
	case ActionDead:
		if !comp.LetterHeld {
			pairs, _ := json.Marshal(comp.Letter.Pairs()) // strings always encode
			extra = string(pairs)
		}
		hold, holdBackoff = comp.Hold, max(comp.HoldBackoff.Milliseconds(), 1)
	}
	record, recordKey := comp.Record, comp.RecordKey
	if record == nil || recordKey == "" {
		record, recordKey = nil, comp.State // not written; keeps the script in one slot
	}
	c.keys = append(c.keys, target, comp.State, recordKey)
	c.args = append(c.args, comp.EntryID, comp.Action, comp.Final,
		ttlMillis(comp.TTL), comp.Response, comp.Envelope, extra,
		comp.ID, record, ttlMillis(comp.RecordTTL), hold, holdBackoff, flag(comp.Fast))
	c.n++
}

// Result returns Written, CallerGone, Held, Fenced, ReplyWrongType or
// StateWrongType for each outcome, in the order added.
func (c *Complete) Result() ([]int64, error) { return c.ints(c.n) }

// ttlMillis is d in milliseconds for PEXPIRE: at least 1, at most
// MaxStateTTL (so that an out-of-range deadline never makes Redis refuse
// the expiry, and with it the whole call).
func ttlMillis(d time.Duration) int64 {
	return min(max(d, time.Millisecond), MaxStateTTL).Milliseconds()
}
