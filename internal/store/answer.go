package store

import "time"

// answerScript finishes a batch of unary requests on the fast path (no
// state hash: the entry's delivery is its claim): for each it writes the
// response to the caller's stream (NOMKSTREAM: nothing is created for a
// caller that is gone), then acknowledges and removes all their entries at
// once. There is no state to record and no fence: a worker that lost a
// request to a takeover still answers truthfully, and the caller takes
// the first answer. Its ARGV is two values per request rather than the
// complete script's ten, which is most of what a completion costs Redis.
//
//	KEYS[1] request stream   KEYS[1+k] reply stream of request k
//	ARGV[1] consumer group   ARGV[2k] entry id of request k
//	ARGV[2k+1] its response envelope
//
// Returns one result per request: 1 when written, 0 when the reply stream
// no longer exists, -2 when the reply-to key holds something other than a
// stream (nothing is written for that request and its entry is left
// pending, for the caller to dead-letter; the others are answered all the
// same).
var answerScript = newOOMScript("answer", `
local out, done = {}, {}
for k = 1, #KEYS - 1 do
  local r = redis.pcall('XADD', KEYS[k + 1], 'NOMKSTREAM', '*', 'e', ARGV[2 * k + 1])
  if wrong_type(r) then
    out[k] = -2
  else
    out[k] = r and 1 or 0
    done[#done + 1] = ARGV[2 * k]
  end
end
retire_entries(KEYS[1], ARGV[1], done)
return out
`)

// answerKeepScript is answerScript for a server that keeps finished calls
// (ServerOptions.Retention): each request's finished record (a
// wire.Finished) is also written under its request id (Shard.Done), for
// the retention. That is one SET per call more than answerScript, and the
// record's memory for the retention; a caller that is gone does not keep
// its record from being written (the call did finish).
//
//	KEYS[1] request stream   KEYS[2k] reply stream of request k
//	KEYS[2k+1] its record key (Shard.Done)
//	ARGV[1] consumer group   ARGV[2] retention ms
//	ARGV[3k] entry id of request k   ARGV[3k+1] its response envelope
//	ARGV[3k+2] its record
//
// Returns what answerScript returns; a request whose reply-to is not a
// stream has its record written all the same (the call did finish).
var answerKeepScript = newOOMScript("answer_keep", `
local out, done = {}, {}
for k = 1, (#KEYS - 1) / 2 do
  local r = redis.pcall('XADD', KEYS[2 * k], 'NOMKSTREAM', '*', 'e', ARGV[3 * k + 1])
  redis.call('SET', KEYS[2 * k + 1], ARGV[3 * k + 2], 'PX', ARGV[2])
  if wrong_type(r) then
    out[k] = -2
  else
    out[k] = r and 1 or 0
    done[#done + 1] = ARGV[3 * k]
  end
end
retire_entries(KEYS[1], ARGV[1], done)
return out
`)

// Answer writes the answers of fast-path unary requests of one request
// stream in one script run, and retires their entries.
type Answer struct {
	Call
	n    int
	keep bool
}

// NewAnswer starts an Answer for requests of stream; size is how many
// will be added. With retention > 0 each answer also keeps its request's
// finished record for that long (answerKeepScript); otherwise nothing but
// the answer is written.
func NewAnswer(stream string, retention time.Duration, size int) *Answer {
	a := new(Answer)
	a.Start(stream, retention, size)
	return a
}

// Start makes a a new Answer, as NewAnswer would, in the memory of its
// earlier batch: a server writes one batch of answers after another, and
// their arguments were a tenth of what it allocated per call. a's earlier
// batch must have run.
func (a *Answer) Start(stream string, retention time.Duration, size int) {
	// Per request: its reply stream (and record key) as keys, its entry id
	// and response (and record) as arguments, and a reference for each
	// but the first key (see Call.Queue).
	keys, args, script := 1, 2, answerScript
	var head []any // the arguments before the requests'
	if retention > 0 {
		keys, args, script = 2, 3, answerKeepScript
		head = []any{WorkersGroup, max(retention.Milliseconds(), 1)}
	} else {
		head = []any{WorkersGroup}
	}
	clear(a.refs[:cap(a.refs)]) // let go of the earlier batch's responses
	*a = Answer{
		Call: Call{script: script,
			keys: append(reuse(a.keys, 1+keys*size), stream),
			args: append(reuse(a.args, len(head)+args*size), head...),
			refs: reuse(a.refs, (keys+args)*size),
			argv: a.argv,
		},
		keep: retention > 0,
	}
}

// reuse returns s emptied, with room for n elements: its own array when
// that is big enough.
func reuse[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, 0, n)
	}
	return s[:0]
}

// Add adds the answer resp to the request in entry, for the caller whose
// stream is replyTo. An Answer that keeps records writes record (a
// wire.Finished) to done, the request's Shard.Done key; others ignore
// both.
func (a *Answer) Add(replyTo, entryID string, resp []byte, done string, record []byte) {
	if a.keep {
		a.keys = append(a.keys, replyTo, done)
		a.args = append(a.args, a.refString(entryID), a.ref(resp), a.ref(record))
	} else {
		a.keys = append(a.keys, replyTo)
		a.args = append(a.args, a.refString(entryID), a.ref(resp))
	}
	a.n++
}

// Result returns Written, CallerGone or ReplyWrongType for each answer,
// in the order added.
func (a *Answer) Result() ([]int64, error) { return a.ints(a.n) }
