package store

import (
	"fmt"
	"time"
)

// beginScript decides, for a batch of request entries a worker has just
// received (read or reclaimed), which ones it may run, in one round trip.
// See Begin for the decisions.
//
//	KEYS[1]      request stream              KEYS[2] workers hash
//	KEYS[2k+1]   state hash of entry k       KEYS[2k+2] its reply stream
//	             (async entries: the state hash again; never written)
//	ARGV[1] consumer group   ARGV[2] worker id   ARGV[3] lease ms
//	ARGV[4] state margin ms (kept past the deadline)
//	ARGV[5] silence ms after which a worker without a heartbeat is dead
//	ARGV[7k-1..7k+5] entry k: entry id, deadline (ms), idempotent (1|0),
//	                 attempt, has a caller waiting for a reply (1|0),
//	                 the worker it was taken over from ('' when read
//	                 afresh), runs on the fast path when read afresh (1|0)
//
// An entry taken over without a state hash that runs on the fast path
// when read afresh (its delivery was its claim) may have run under the
// worker it was taken from: it is rerun when idempotent and answered
// "outcome unknown" ('orphan') otherwise. Any other entry without a state
// hash never ran: no worker had claimed it.
//
// An async entry whose state holds a dead letter waiting for room
// (wire.StateHeld, see completeScript) is claimed with the decision
// 'held' when it is the held request (its attempt is past the state's),
// or that request reclaimed from a worker that is gone: the worker
// dead-letters it, never runs it. Another request with its key (a lower
// attempt) is 'finished', as for any key that failed an attempt.
//
// Returns one {decision, detail} per entry. Each entry is decided on its
// own: a key of one entry's that holds a foreign value (WRONGTYPE) makes
// its decision 'foreign', naming the key, and a deadline too far ahead
// keeps its state MaxStateTTL; neither fails the others.
var beginScript = newOOMScript("begin", `
local now = now_ms()
local stream, workers, group, worker = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local lease, margin, silence = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local function gone(owner, leaseUntil)
  if (tonumber(leaseUntil) or 0) > now then return false end
  if owner == worker then return true end
  local beat = beat_ms(redis.call('HGET', workers, owner))
  return not beat or now - beat > silence
end
local out = {}
for k = 1, (#KEYS - 2) / 2 do
  local st, reply = KEYS[2 * k + 1], KEYS[2 * k + 2]
  local a = 7 * k - 2
  local entry, deadline = ARGV[a + 1], tonumber(ARGV[a + 2])
  local idempotent, attempt = ARGV[a + 3] == '1', tonumber(ARGV[a + 4])
  local replies, takenFrom, fast = ARGV[a + 5] == '1', ARGV[a + 6], ARGV[a + 7] == '1'
  local ttl = state_ttl(deadline, now, margin)
  local function retire() retire_entries(stream, group, {entry}) end
  local function claim()
    redis.call('HSET', st, 'state', 'PROCESSING', 'worker', worker, 'entry', entry,
      'lease', now + lease, 'attempt', attempt, 'claimed_ms', now)
    redis.call('PEXPIRE', st, ttl)
  end
  local cur = redis.pcall('HMGET', st, 'state', 'worker', 'entry', 'lease', 'attempt', 'resp', 'held')
  local foreign = wrong_type(cur)
  local state, owner
  if not foreign then state, owner = cur[1], cur[2] or 'unknown' end
  if state == 'DEAD' then state = nil end
  if foreign then
    out[k] = {'foreign', st}
  elseif cur[7] and not replies and ((state == 'FAILED' and attempt > (tonumber(cur[5]) or 0))
      or (state == 'PROCESSING' and cur[3] == entry and gone(owner, cur[4]))) then
    -- the held request itself (held as its next attempt; another request
    -- with its key is a duplicate, below): dead-letter it, never run it
    claim()
    out[k] = {'held', ''}
  elseif not state then
    if now >= deadline then
      redis.call('HSET', st, 'state', 'TIMEOUT', 'marked_ms', now)
      redis.call('PEXPIRE', st, margin)
      retire()
      out[k] = {'expired', ''}
    elseif takenFrom ~= '' and fast then
      -- a fast-path request whose worker is gone: it may have run
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
  elseif state == 'SUCCESS' or (state == 'FAILED' and attempt <= (tonumber(cur[5]) or 0)) then
    if replies and cur[6] and wrong_type(redis.pcall('XADD', reply, 'NOMKSTREAM', '*', 'e', cur[6])) then
      out[k] = {'foreign', reply}
    elseif replies then
      retire()
      out[k] = {'resent', state}
    else
      retire()
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

// Verdict is the begin script's decision on an entry.
type Verdict string

// The verdicts of the begin script.
const (
	// VerdictRun: claimed PROCESSING for this worker; run the handler.
	VerdictRun Verdict = "run"
	// VerdictRerun: idempotent and its worker is gone; claimed, run again. The
	// detail names that worker.
	VerdictRerun Verdict = "rerun"
	// VerdictOrphan: not idempotent (or past its deadline) and its worker is
	// gone; claimed for this worker to answer ABORTED "outcome unknown".
	// The detail names that worker.
	VerdictOrphan Verdict = "orphan"
	// VerdictBusy: another worker holds it and is alive; left alone.
	VerdictBusy Verdict = "busy"
	// VerdictDuplicate: another entry with this request id is running; retired.
	VerdictDuplicate Verdict = "duplicate"
	// VerdictResent: already finished; the stored response was sent again and
	// the entry retired.
	VerdictResent Verdict = "resent"
	// VerdictFinished: async, its key already succeeded (or this attempt already
	// failed); retired, not run again.
	VerdictFinished Verdict = "finished"
	// VerdictClosed: the client gave up first (TIMEOUT or CANCELLED); retired.
	VerdictClosed Verdict = "closed"
	// VerdictExpired: the deadline passed in the queue; marked TIMEOUT, retired.
	VerdictExpired Verdict = "expired"
	// VerdictHeld: an async request whose dead letter waits for room in a
	// dead-letter stream at its cap (wire.StateHeld); claimed for this
	// worker to dead-letter with the held letter (or hold again), never to
	// run.
	VerdictHeld Verdict = "held"
	// VerdictForeign: a key of the entry's holds another kind of value than
	// rpr keeps there (something other than rpr wrote under its prefix);
	// nothing was written for it and it is still pending, for the worker
	// to dead-letter. The detail names the key: the request's state hash,
	// or its reply stream.
	VerdictForeign Verdict = "foreign"
)

// Decision is the begin script's verdict on one entry with its detail (a
// worker id or a state), or the one a worker makes itself for a fast-path
// request (VerdictRun).
type Decision struct {
	Verdict Verdict
	Detail  string
}

// BeginEntry is one request entry a worker received, as the begin script
// needs it.
type BeginEntry struct {
	// State is the request's state hash.
	State string
	// ReplyTo is its caller's response stream; "" for an async request,
	// which has no caller waiting.
	ReplyTo  string
	EntryID  string
	Deadline int64 // Redis unix ms
	// Idempotent: the method may run again after a crash.
	Idempotent bool
	Attempt    int
	// TakenFrom names the worker the entry was reclaimed from; "" when
	// read afresh.
	TakenFrom string
	// Fast: read afresh, the entry runs on the fast path (no state hash
	// while it runs: its delivery is its claim), so when it is taken over
	// without a state hash it may have run.
	Fast bool
}

// Begin decides, for a batch of request entries of one stream that a
// worker has just read or reclaimed, which it may run, in one round trip
// (see the verdicts, VerdictRun to VerdictForeign).
//
// An entry taken over without a state hash that takes the fast path
// (BeginEntry.Fast: its delivery was its claim) ran under a worker that
// is gone, which may have executed it: it is rerun when idempotent and
// answered "outcome unknown" (VerdictOrphan) otherwise. A request
// PROCESSING under another worker
// is taken over only when that worker is gone: its lease on the request
// expired and it has not beaten for the silence. (A PROCESSING request
// under this very worker id is from an earlier life of it: the caller
// never passes requests it still runs.)
type Begin struct {
	Call
	n int
}

// NewBegin starts a Begin for entries of stream in shard sk, by worker:
// claims hold for lease, states are kept margin past their deadline, and
// a worker silent for silence is gone. size is how many entries will be
// added.
func NewBegin(sk Shard, stream, worker string, lease, margin, silence time.Duration, size int) *Begin {
	b := &Begin{Call: Call{script: beginScript}}
	b.keys = append(make([]string, 0, 2+2*size), stream, sk.Workers())
	b.args = append(make([]any, 0, 5+7*size), WorkersGroup, worker, lease.Milliseconds(), margin.Milliseconds(), silence.Milliseconds())
	return b
}

// Add adds one entry.
func (b *Begin) Add(e BeginEntry) {
	reply, replies := e.ReplyTo, 1
	if reply == "" {
		reply, replies = e.State, 0 // never written; keeps the script in one slot
	}
	b.keys = append(b.keys, e.State, reply)
	b.args = append(b.args, e.EntryID, e.Deadline, flag(e.Idempotent), e.Attempt, replies, e.TakenFrom, flag(e.Fast))
	b.n++
}

// Result returns the verdict on each entry, in the order added.
func (b *Begin) Result() ([]Decision, error) {
	reply, err := b.reply()
	if err != nil {
		return nil, err
	}
	items, _ := reply.([]any)
	if len(items) != b.n {
		return nil, fmt.Errorf("script begin answered %d decisions for %d entries", len(items), b.n)
	}
	out := make([]Decision, b.n)
	for i, item := range items {
		pair, _ := item.([]any)
		if len(pair) != 2 {
			return nil, fmt.Errorf("script begin: malformed decision %v", item)
		}
		verdict, _ := pair[0].(string)
		out[i].Verdict = Verdict(verdict)
		out[i].Detail, _ = pair[1].(string)
	}
	return out, nil
}

// flag is a Lua boolean argument: 1 or 0.
func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}
