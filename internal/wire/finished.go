package wire

import "encoding/json"

// Finished is the record a server keeps under a request's id once it has
// finished it, at T:done:<request id>: a string holding this struct as
// JSON, with a TTL. Nothing else reads it than tools (`rpr trace`), so it
// holds only what they show, and never a payload. It is written
//
//   - for a unary call, when its server keeps finished calls
//     (RetentionMs in its Worker record; the tunnel option is
//     ServerOptions.Retention), by the answer (or complete) script that
//     writes the call's answer, for the retention: Method, Worker, Code,
//     Message, StartedMs, DoneMs and Bytes;
//   - for an async request sent with an idempotency key of its own, whose
//     state hash is therefore named by the key and not by the id, by the
//     complete script with every outcome of an attempt, for as long as that
//     state (the idempotency window): Key alone. The state hash
//     T:st:<key> then also names the request in its StateID field.
//
// A record that does not parse is to be ignored, as one of a later release
// may carry fields this one does not know.
type Finished struct {
	// Key is the async request's idempotency key (its state is T:st:<Key>).
	Key string `json:"key,omitempty"`
	// Method is the method's short name ("SayHello").
	Method string `json:"method,omitempty"`
	// Worker is the worker that ran it.
	Worker string `json:"worker,omitempty"`
	// Code is the answer's status code (absent: OK); Message its status
	// message, cut to at most MaxFinishedMessage bytes.
	Code    uint32 `json:"code,omitempty"`
	Message string `json:"msg,omitempty"`
	// StartedMs and DoneMs are when the handler started and when it
	// returned (Redis unix ms).
	StartedMs int64 `json:"start_ms,omitempty"`
	DoneMs    int64 `json:"done_ms,omitempty"`
	// Bytes is the size of the answer's payload.
	Bytes int `json:"bytes,omitempty"`
}

// MaxFinishedMessage bounds the status message a Finished record keeps.
const MaxFinishedMessage = 256

// Encode returns the record as it is stored.
func (f Finished) Encode() []byte {
	raw, _ := json.Marshal(f) // strings and numbers always encode
	return raw
}

// ParseFinished reads a Finished record; false when raw is not one.
func ParseFinished(raw string) (Finished, bool) {
	var f Finished
	if json.Unmarshal([]byte(raw), &f) != nil {
		return Finished{}, false
	}
	return f, true
}

// CutMessage returns msg cut to at most MaxFinishedMessage bytes, on a
// UTF-8 character boundary, with "…" appended when it was cut.
func CutMessage(msg string) string {
	if len(msg) <= MaxFinishedMessage {
		return msg
	}
	const ellipsis = "…"
	end := MaxFinishedMessage - len(ellipsis)
	for end > 0 && msg[end]&0xC0 == 0x80 { // a continuation byte
		end--
	}
	return msg[:end] + ellipsis
}
