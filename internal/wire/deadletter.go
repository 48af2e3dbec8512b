package wire

import "strconv"

// Fields of a dead-letter stream entry (rpr:v1:{S}:dlq). Every entry has
// Field (the request envelope, or the raw entry when it did not decode),
// DLEntry and DLFailedMs, written by the script that dead-letters it; the
// rest are what DeadLetter holds, those of an entry that did not decode
// being only DLReason, DLCode, DLWorker and DLLane.
const (
	DLEntry      = "entry"       // the request's entry id in its request stream
	DLFailedMs   = "failed_ms"   // when it was dead-lettered, Redis unix ms
	DLReason     = "reason"      // why, in a few words
	DLCode       = "code"        // the last status code, by name
	DLError      = "error"       // the last status message
	DLID         = "id"          // the request id
	DLKey        = "key"         // the idempotency key
	DLMethod     = "method"      // "service/method"
	DLAttempts   = "attempts"    // attempts that ran
	DLReplays    = "replays"     // times an operator replayed it before
	DLEnqueuedMs = "enqueued_ms" // when it was first queued, Redis unix ms
	DLWorker     = "worker"      // the worker that dead-lettered it
	DLLane       = "lane"        // the lane it was queued in, where a replay queues it again
)

// DeadLetter is what a dead-letter entry records about its request beside
// the envelope.
type DeadLetter struct {
	Reason     string
	Code       string
	Error      string
	ID         string
	Key        string
	Method     string
	Attempts   int
	Replays    int
	EnqueuedMs int64
	Worker     string
	Lane       string
}

// Pairs returns the dead letter's fields and values, in the order servers
// write them after the envelope, DLEntry and DLFailedMs.
func (d DeadLetter) Pairs() []string {
	return []string{
		DLReason, d.Reason,
		DLCode, d.Code,
		DLError, d.Error,
		DLID, d.ID,
		DLKey, d.Key,
		DLMethod, d.Method,
		DLAttempts, strconv.Itoa(d.Attempts),
		DLReplays, strconv.Itoa(d.Replays),
		DLEnqueuedMs, strconv.FormatInt(d.EnqueuedMs, 10),
		DLWorker, d.Worker,
		DLLane, d.Lane,
	}
}

// ParseDeadLetter reads the fields of a dead-letter entry, as go-redis
// returns an entry's values; fields that are absent or unreadable are
// left zero.
func ParseDeadLetter(values map[string]any) DeadLetter {
	str := func(field string) string { s, _ := values[field].(string); return s }
	num := func(field string) int64 { n, _ := strconv.ParseInt(str(field), 10, 64); return n }
	return DeadLetter{
		Reason:     str(DLReason),
		Code:       str(DLCode),
		Error:      str(DLError),
		ID:         str(DLID),
		Key:        str(DLKey),
		Method:     str(DLMethod),
		Attempts:   int(num(DLAttempts)),
		Replays:    int(num(DLReplays)),
		EnqueuedMs: num(DLEnqueuedMs),
		Worker:     str(DLWorker),
		Lane:       str(DLLane),
	}
}
