package store

// replayScript moves dead letters back to a request stream, each in one
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
// its key already succeeded), 'gone' (no such dead letter any more) or
// 'foreign' (its state key holds something other than a hash; the letter
// is kept, and the others are replayed all the same).
var replayScript = newScript("replay", `
local out = {}
for k = 1, #KEYS - 2 do
  local entry, env = ARGV[2 * k - 1], ARGV[2 * k]
  local state
  if #redis.call('XRANGE', KEYS[1], entry, entry) > 0 then
    state = redis.pcall('HGET', KEYS[2 + k], 'state')
  end
  if state == nil then
    out[k] = 'gone'
  elseif wrong_type(state) then
    out[k] = 'foreign'
  elseif state == 'SUCCESS' then
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

// Replay's verdicts on a dead letter.
const (
	Replayed  = "replayed"  // queued again
	Succeeded = "succeeded" // dropped: its idempotency key has succeeded since
	Gone      = "gone"      // no such dead letter any more
	// ForeignState: kept, not queued: its state key holds another kind of
	// value than a hash (something other than rpr wrote it).
	ForeignState = "foreign"
)

// Replay queues dead letters of one shard again, into one lane's request
// stream, each atomically with its removal.
type Replay struct {
	Call
	n int
}

// NewReplay starts a Replay from shard sk's dead-letter stream into
// stream.
func NewReplay(sk Shard, stream string) *Replay {
	return &Replay{Call: Call{script: replayScript, keys: []string{sk.DeadLetters(), stream}}}
}

// Add adds the dead letter in entry, whose idempotency key's state hash is
// state, to be queued as envelope.
func (r *Replay) Add(entryID, state string, envelope []byte) {
	r.keys = append(r.keys, state)
	r.args = append(r.args, entryID, envelope)
	r.n++
}

// Result returns Replayed, Succeeded, Gone or ForeignState for each dead
// letter, in the order added.
func (r *Replay) Result() ([]string, error) { return r.strings(r.n) }
