package wire

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Handoff is what a worker publishes, as JSON, on its service's handoff
// channel ({S}:handoff) when it gives away a request for a method it does
// not serve (a worker of an older release, in a rolling deploy) to a live
// worker of the same lane and shard whose record lists the method: it
// has already moved the entry into that worker's pending entries (XCLAIM),
// and the worker reads it by id and runs it as if it had read it itself.
// A worker that gets a handoff it cannot serve either hands it on or, after
// MaxHandoffHops, answers UNIMPLEMENTED.
type Handoff struct {
	To     string `json:"to"`     // the worker id that takes the entry
	Stream string `json:"stream"` // the request stream holding it
	Entry  string `json:"entry"`  // the entry's id
	Hops   int    `json:"hops"`   // handoffs of this entry so far, this one included
}

// MaxHandoffHops bounds how often one request is handed on: views of who
// serves what are at most a beat old, so a second hop is rare and a third
// means no live worker serves the method after all.
const MaxHandoffHops = 3

// ParseHandoff reads a handoff message.
func ParseHandoff(raw string) (Handoff, error) {
	var h Handoff
	if err := json.Unmarshal([]byte(raw), &h); err != nil {
		return Handoff{}, fmt.Errorf("malformed handoff: not a JSON handoff (%w)", err)
	}
	if h.To == "" || h.Stream == "" || h.Entry == "" || h.Hops < 1 {
		return Handoff{}, errors.New("malformed handoff: it needs to, stream, entry and hops >= 1")
	}
	return h, nil
}
