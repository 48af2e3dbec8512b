package main

import (
	"time"

	"github.com/rprtunnel/rpr/admin"
)

// traceJSON is a trace as `rpr trace -o json` prints it: what the text
// shows, with times in RFC 3339 (UTC) and durations in milliseconds.
// Found is false when no service knows the request (exit status 1);
// Searched then says what each service keeps of finished unary calls.
type traceJSON struct {
	Arg            string             `json:"arg"`
	ByKey          bool               `json:"by_key"`
	RequestID      string             `json:"request_id,omitempty"`
	Made           *time.Time         `json:"made,omitempty"`
	Biz            string             `json:"biz,omitempty"`
	Found          bool               `json:"found"`
	Service        string             `json:"service,omitempty"`
	Shard          int                `json:"shard"`
	Shards         int                `json:"shards,omitempty"`
	Lane           string             `json:"lane,omitempty"`
	Key            string             `json:"key,omitempty"`
	KeyHeldBy      string             `json:"key_held_by,omitempty"`
	State          string             `json:"state,omitempty"`
	Worker         string             `json:"worker,omitempty"`
	PreviousWorker string             `json:"previous_worker,omitempty"`
	Attempt        string             `json:"attempt,omitempty"`
	Held           bool               `json:"held,omitempty"`
	Entry          string             `json:"entry,omitempty"`
	Claimed        *time.Time         `json:"claimed,omitempty"`
	Done           *time.Time         `json:"done,omitempty"`
	Marked         *time.Time         `json:"marked,omitempty"`
	LeaseUntil     *time.Time         `json:"lease_until,omitempty"`
	ExpiresInMs    int64              `json:"expires_in_ms,omitempty"`
	Queued         *traceEntryJSON    `json:"queued,omitempty"`
	Retry          *traceRetryJSON    `json:"retry,omitempty"`
	Answer         *traceAnswerJSON   `json:"answer,omitempty"`
	Finished       *traceFinishedJSON `json:"finished,omitempty"`
	Stream         *traceStreamJSON   `json:"stream,omitempty"`
	DeadLetters    []traceLetterJSON  `json:"dead_letters,omitempty"`
	// RetentionMs is ServerOptions.Retention of the service's servers
	// (the longest); RetentionPartial that some keep nothing.
	RetentionMs      int64               `json:"retention_ms"`
	RetentionPartial bool                `json:"retention_partial,omitempty"`
	Searched         []traceSearchedJSON `json:"searched,omitempty"`
}

type traceEntryJSON struct {
	EntryID  string              `json:"entry_id"`
	Method   string              `json:"method"`
	Enqueued *time.Time          `json:"enqueued,omitempty"`
	Deadline *time.Time          `json:"deadline,omitempty"`
	Header   map[string][]string `json:"header,omitempty"`
}

type traceRetryJSON struct {
	Due     time.Time `json:"due"`
	Attempt int       `json:"attempt"`
}

type traceAnswerJSON struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
	Bytes   int    `json:"bytes"`
}

type traceFinishedJSON struct {
	Method      string     `json:"method,omitempty"`
	Worker      string     `json:"worker,omitempty"`
	Started     *time.Time `json:"started,omitempty"`
	Done        *time.Time `json:"done,omitempty"`
	Code        string     `json:"code"`
	Message     string     `json:"message,omitempty"`
	Bytes       int        `json:"bytes"`
	ExpiresInMs int64      `json:"expires_in_ms"`
}

type traceStreamJSON struct {
	Sent     int64 `json:"sent"`
	Received int64 `json:"received"`
}

type traceLetterJSON struct {
	EntryID string    `json:"entry_id"`
	Time    time.Time `json:"time"`
	Reason  string    `json:"reason,omitempty"`
}

type traceSearchedJSON struct {
	Service     string `json:"service"`
	RetentionMs int64  `json:"retention_ms"`
	Partial     bool   `json:"partial,omitempty"`
	NoWorkers   bool   `json:"no_workers,omitempty"`
}

// utcOrNil is t in UTC, nil for the zero time (left out of the JSON).
func utcOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// traceToJSON converts tr, the trace of arg, for -o json.
func traceToJSON(arg string, tr *admin.RequestTrace) traceJSON {
	j := traceJSON{
		Arg: arg, ByKey: tr.ByKey, Found: tr.Service != "", Service: tr.Service, Shard: tr.Shard, Shards: tr.Shards,
		Lane: tr.Lane, Key: tr.Key, KeyHeldBy: tr.KeyHeldBy, State: tr.State, Worker: tr.Worker,
		PreviousWorker: tr.PreviousWorker, Attempt: tr.Attempt, Held: tr.Held, Entry: tr.Entry,
		Claimed: utcOrNil(tr.Claimed), Done: utcOrNil(tr.Done), Marked: utcOrNil(tr.Marked), LeaseUntil: utcOrNil(tr.LeaseUntil),
		ExpiresInMs: tr.ExpiresIn.Milliseconds(), RetentionMs: tr.Retention.Milliseconds(), RetentionPartial: tr.RetentionPartial,
	}
	if !tr.ID.Time.IsZero() {
		j.RequestID, j.Made, j.Biz = tr.ID.String(), utcOrNil(tr.ID.Time), tr.ID.Biz
	}
	if q := tr.Queued; q != nil {
		j.Queued = &traceEntryJSON{EntryID: q.ID, Method: q.Method, Enqueued: utcOrNil(q.Enqueued), Deadline: utcOrNil(q.Deadline), Header: q.Header}
	}
	if r := tr.Retry; r != nil {
		j.Retry = &traceRetryJSON{Due: r.Due.UTC(), Attempt: r.Attempt}
	}
	if a := tr.Answer; a != nil {
		j.Answer = &traceAnswerJSON{Code: a.Code.String(), Message: a.Message, Bytes: a.Bytes}
	}
	if f := tr.Finished; f != nil {
		j.Finished = &traceFinishedJSON{Method: f.Method, Worker: f.Worker, Started: utcOrNil(f.Started), Done: utcOrNil(f.Done),
			Code: f.Code.String(), Message: f.Message, Bytes: f.Bytes, ExpiresInMs: f.ExpiresIn.Milliseconds()}
	}
	if s := tr.Stream; s != nil {
		j.Stream = &traceStreamJSON{Sent: s.Sent, Received: s.Received}
	}
	for _, d := range tr.DeadLetters {
		j.DeadLetters = append(j.DeadLetters, traceLetterJSON{EntryID: d.ID, Time: d.Time.UTC(), Reason: d.Reason})
	}
	for _, s := range tr.Searched {
		j.Searched = append(j.Searched, traceSearchedJSON{Service: s.Service, RetentionMs: s.Retention.Milliseconds(), Partial: s.Partial, NoWorkers: s.NoWorkers})
	}
	return j
}
