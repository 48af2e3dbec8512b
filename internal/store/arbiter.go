package store

import (
	"fmt"
	"time"

	"github.com/rprtunnel/rpr/internal/wire"
)

// arbiterScript is the client's side of the arbiter: when a call's deadline
// passes or its caller cancels, it settles whether the request ran.
//
// A request with a state hash (a mark, or one a worker took over) is
// settled by it: the mark wins only over an absent state. Otherwise, for a
// request sent on the fast path whose entry id the client knows, the
// request stream decides: an entry still there and not delivered to any
// worker is deleted, so it never runs, and marked; a delivered one
// (pending) may be running, so it is marked (a worker that has not begun
// it yet skips it) and, if the caller cancelled, the servers are told so
// its handler is cancelled; no entry at all means it finished. A stream
// without its consumer group counts as delivered to nobody. Without an
// entry id (the send's reply was lost) nothing can be proved.
//
//	KEYS[1] state hash   KEYS[2] request stream
//	ARGV[1] TIMEOUT | CANCELLED   ARGV[2] TTL ms
//	ARGV[3] cancel channel        ARGV[4] cancel message (see wire.ParseCancel)
//	ARGV[5] entry id, '' when unknown   ARGV[6] consumer group
//
// Returns {1, ARGV[1], term} when the request will never run, or {0,
// what, term}: the state found, 'DELIVERED', 'FINISHED', or 'UNKNOWN'.
// term (node_term) is the master's that settled a mark, its own or a
// TIMEOUT or CANCELLED found, and empty otherwise: a "never runs" holds only
// if the term that held the request when it was sent settled it.
var arbiterScript = newScript("arbiter", termLua+`
local st, stream, mark, entry = KEYS[1], KEYS[2], ARGV[1], ARGV[5]
local function stamp()
  redis.call('HSET', st, 'marked_ms', now_ms())
  redis.call('PEXPIRE', st, ARGV[2])
end
local state = redis.call('HGET', st, 'state')
if state then
  if state == 'PROCESSING' and mark == 'CANCELLED' then
    redis.call('PUBLISH', ARGV[3], ARGV[4])
  end
  if state == 'TIMEOUT' or state == 'CANCELLED' then return {0, state, node_term()} end
  return {0, state, ''}
end
if entry == '' then return {0, 'UNKNOWN', ''} end
-- No consumer group (Redis lost it, or no server ever started on this
-- lane: NOGROUP) means no worker can have read the entry. Any other error
-- (an ACL that refuses XPENDING) is raised: counting it as "not
-- delivered" would withdraw a request a worker may be running.
local pending = redis.pcall('XPENDING', stream, ARGV[6], entry, entry, 1)
if type(pending) == 'table' and pending.err then
  if string.sub(pending.err, 1, 7) ~= 'NOGROUP' then return error(pending) end
elseif #pending > 0 then
  redis.call('HSET', st, 'state', mark)
  stamp()
  if mark == 'CANCELLED' then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
  return {0, 'DELIVERED', ''}
end
-- Not delivered: withdraw it. XDEL says whether the entry was there, so
-- the caller never reads the request stream (its ACL role needs no read
-- of other callers' requests, only XPENDING's ids and counts).
if redis.call('XDEL', stream, entry) == 1 then
  redis.call('HSET', st, 'state', mark)
  stamp()
  return {1, mark, node_term()}
end
return {0, 'FINISHED', ''}
`)

// What the arbiter found, besides a state, when it could not mark a
// request.
const (
	ArbiterDelivered = "DELIVERED" // a worker has the entry: it may be running
	ArbiterFinished  = "FINISHED"  // the entry is gone: the request finished
	ArbiterUnknown   = "UNKNOWN"   // no entry id: nothing can be proved
)

// Arbiter settles, for a caller that gave up on a request, whether the
// request ran; see its Result.
type Arbiter struct {
	Call
}

// NewArbiter starts the arbiter for request id in shard sk, sent to
// stream as entryID ("" when that is unknown): mark is wire.StateTimeout
// or wire.StateCancelled, kept for ttl; a cancel is announced on
// cancels (Keyspace.Cancels) as cancelMsg (the id, or the id signed by
// its caller: wire.CallerKey.CancelMessage).
func NewArbiter(sk Shard, stream, cancels, id, cancelMsg, entryID, mark string, ttl time.Duration) *Arbiter {
	return &Arbiter{Call: Call{script: arbiterScript,
		keys: []string{sk.State(id), stream},
		args: []any{mark, ttl.Milliseconds(), cancels, cancelMsg, entryID, WorkersGroup}}}
}

// Settled is what the arbiter found and did.
type Settled struct {
	// Won is whether the mark won: the master that settled it knows of
	// no worker that took the request, which now never will.
	Won bool
	// Found is the mark when it won, and otherwise what was found: a
	// state, ArbiterDelivered, ArbiterFinished or ArbiterUnknown.
	Found string
	// Term is the term of the master that settled a mark (Won, or a
	// TIMEOUT or CANCELLED state found), "" otherwise: see TermProbe.
	Term string
}

// Marked reports whether the request is marked never to run: the mark
// won, or an earlier TIMEOUT or CANCELLED was found. Term says which
// master settled it.
func (s Settled) Marked() bool {
	return s.Won || s.Found == wire.StateTimeout || s.Found == wire.StateCancelled
}

// Result returns the verdict.
func (a *Arbiter) Result() (Settled, error) {
	reply, err := a.reply()
	if err != nil {
		return Settled{}, err
	}
	triple, _ := reply.([]any)
	if len(triple) != 3 {
		return Settled{}, fmt.Errorf("script arbiter: malformed reply %v", reply)
	}
	n, _ := triple[0].(int64)
	found, _ := triple[1].(string)
	term, _ := triple[2].(string)
	return Settled{Won: n == 1, Found: found, Term: term}, nil
}
