package store

import (
	"fmt"

	"github.com/rprtunnel/rpr/internal/wire"
)

// replyScript answers a caller whose request could not even be decoded
// (so it has no state), without creating a stream for a departed caller.
//
//	KEYS[1] caller's response stream
//	ARGV[1] response envelope
var replyScript = newOOMScript("reply", `
if redis.call('XADD', KEYS[1], 'NOMKSTREAM', '*', 'e', ARGV[1]) then return 1 end
return 0
`)

// Reply answers a caller whose request could not be decoded.
type Reply struct {
	Call
}

// NewReply writes resp to the caller's stream replyTo, if it exists.
func NewReply(replyTo string, resp []byte) *Reply {
	return &Reply{Call: Call{script: replyScript, keys: []string{replyTo}, args: []any{resp}}}
}

// deadLetterScript moves an entry that cannot be processed (malformed
// envelope) to the dead-letter stream with the reason, then retires it. A
// dead-letter stream at its cap takes nothing and trims nothing: the
// entry is left pending, for the reclaim scan to offer again.
//
//	KEYS[1] request stream      KEYS[2] dead-letter stream
//	ARGV[1] consumer group      ARGV[2] request entry id
//	ARGV[3] raw entry payload   ARGV[4] reason
//	ARGV[5] status code name    ARGV[6] worker id
//	ARGV[7] the lane the entry was queued in
//	ARGV[8] the dead-letter stream's cap (0: none)
//
// Returns 1 when dead-lettered, 0 when held (the stream is at its cap).
var deadLetterScript = newOOMScript("dead_letter", `
local cap = tonumber(ARGV[8])
if cap > 0 and redis.call('XLEN', KEYS[2]) >= cap then return 0 end
redis.call('XADD', KEYS[2], '*', 'e', ARGV[3], 'entry', ARGV[2], 'failed_ms', now_ms(),
  'reason', ARGV[4], 'code', ARGV[5], 'worker', ARGV[6], 'lane', ARGV[7])
retire_entries(KEYS[1], ARGV[1], {ARGV[2]})
return 1
`)

// DeadLetterEntry moves one undecodable entry to its shard's dead-letter
// stream and retires it.
type DeadLetterEntry struct {
	Call
}

// NewDeadLetterEntry dead-letters the entry entryID of stream in shard sk,
// whose raw envelope is raw: letter gives the reason, code, worker and
// lane (its other fields are not known for such an entry). A dead-letter
// stream of maxDeadLetters entries or more takes it not (0: no cap).
func NewDeadLetterEntry(sk Shard, stream, entryID, raw string, letter wire.DeadLetter, maxDeadLetters int64) *DeadLetterEntry {
	return &DeadLetterEntry{Call: Call{script: deadLetterScript,
		keys: []string{stream, sk.DeadLetters()},
		args: []any{WorkersGroup, entryID, raw, letter.Reason, letter.Code, letter.Worker, letter.Lane, max(maxDeadLetters, 0)}}}
}

// Result reports whether the entry was dead-lettered: false when it was
// held, left pending, its dead-letter stream at its cap.
func (d *DeadLetterEntry) Result() (bool, error) {
	if _, err := d.reply(); err != nil {
		return false, err
	}
	n, err := d.cmd.Int64()
	if err != nil {
		return false, fmt.Errorf("script dead_letter: %w", err)
	}
	return n == 1, nil
}
