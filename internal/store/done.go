package store

import "time"

// doneScript finishes a batch of async requests that succeeded on the
// fast path (their delivery was their claim; see BeginEntry.Fast): for
// each it writes the done marker the complete script writes for an async
// success (state SUCCESS, when, by which worker, at which attempt) and
// keeps it for the idempotency window, then acknowledges and removes all
// their entries at once, so an entry is retired only together with its
// marker. That is two commands per request where completing a claimed one
// takes four.
//
// There is no fence, as for fast-path answers (answerScript): a worker
// that lost a request to a takeover (it was cut off from Redis for a
// lease) still records the truth, that the request succeeded, and the
// taker's own completion is then fenced, since the state is no longer its
// claim; an "outcome unknown" dead letter the taker may have written
// first is not replayed into a second run, since its replay finds the
// request done.
//
//	KEYS[1] request stream   KEYS[1+k] state hash of request k
//	ARGV[1] consumer group   ARGV[2] worker id   ARGV[3] marker TTL ms
//	ARGV[2k+2] entry id of request k   ARGV[2k+3] its attempt
//
// Returns one result per request: 1 when written, -3 when the state key
// holds something other than a hash (nothing is written for that request
// and its entry is left pending, for the caller to dead-letter; the others
// complete all the same).
var doneScript = newOOMScript("done", `
local now = now_ms()
local out, done = {}, {}
for k = 1, #KEYS - 1 do
  local st = KEYS[k + 1]
  local r = redis.pcall('HSET', st, 'state', 'SUCCESS', 'done_ms', now, 'worker', ARGV[2], 'attempt', ARGV[2 * k + 3])
  if wrong_type(r) then
    out[k] = -3
  else
    redis.call('PEXPIRE', st, ARGV[3])
    out[k] = 1
    done[#done + 1] = ARGV[2 * k + 2]
  end
end
retire_entries(KEYS[1], ARGV[1], done)
return out
`)

// Done records the success of async requests of one request stream that
// ran on the fast path, in one script run, and retires their entries.
type Done struct {
	Call
	n int
}

// NewDone starts a Done for requests of stream run by worker, whose done
// markers are kept for window (the idempotency window); size is how many
// will be added.
func NewDone(stream, worker string, window time.Duration, size int) *Done {
	d := &Done{Call: Call{script: doneScript}}
	d.keys = append(make([]string, 0, 1+size), stream)
	d.args = append(make([]any, 0, 3+2*size), WorkersGroup, worker, ttlMillis(window))
	d.refs = make([]BytesArg, 0, 2*size) // an argument and a key each (see Call.Queue)
	return d
}

// Add adds the request in entry, whose state hash is state, at attempt.
func (d *Done) Add(state, entryID string, attempt int) {
	d.keys = append(d.keys, state)
	d.args = append(d.args, d.refString(entryID), attempt)
	d.n++
}

// Result returns Written or StateWrongType for each request, in the order
// added.
func (d *Done) Result() ([]int64, error) { return d.ints(d.n) }
