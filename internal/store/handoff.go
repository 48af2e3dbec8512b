package store

// handoffScript gives a request entry a worker holds to another worker of
// the same consumer group and tells it, in one step: the entry moves into
// the other worker's pending entries (XCLAIM, keeping its id, so a caller
// that gives up still finds it), and the handoff is published. An entry no
// longer pending (its caller deleted it) is left alone.
//
//	KEYS[1] request stream
//	ARGV[1] consumer group   ARGV[2] the worker taking it   ARGV[3] entry id
//	ARGV[4] handoff channel  ARGV[5] the handoff message (wire.Handoff)
//
// Returns 1 when handed off, 0 when the entry was not pending.
var handoffScript = newScript("handoff", `
local moved = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
if #moved == 0 then return 0 end
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
`)

// Handoff gives a pending request entry to another worker.
type Handoff struct {
	Call
}

// NewHandoff moves entryID of stream to worker to and publishes message
// on channel.
func NewHandoff(stream, to, entryID, channel string, message []byte) *Handoff {
	return &Handoff{Call: Call{script: handoffScript, keys: []string{stream},
		args: []any{WorkersGroup, to, entryID, channel, message}}}
}

// Result reports whether the entry was handed off.
func (h *Handoff) Result() (bool, error) {
	out, err := h.reply()
	if err != nil {
		return false, err
	}
	n, _ := out.(int64)
	return n == 1, nil
}
