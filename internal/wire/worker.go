package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"
)

// Worker is the record a server keeps of each of its workers in a
// service's workers hash (rpr:v1:{S}:workers, field: the worker id), as
// JSON. Servers write it without BeatMs, which the heartbeat script
// stamps with Redis's clock; the begin script reads BeatMs back to tell
// whether a request's previous worker is gone.
type Worker struct {
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Started int64  `json:"started_ms"`
	BeatMs  int64  `json:"beat_ms,omitempty"`
	// Lane is the lane the worker serves ("" in records of workers that
	// predate lanes: the default lane).
	Lane string `json:"lane,omitempty"`
	// Shards lists the shards it reads, when the service has more than one.
	Shards []int `json:"shards,omitempty"`
	// Methods lists the names of the service's methods the worker serves
	// (absent in records of workers that predate it: every method is
	// taken as served).
	Methods []string `json:"methods,omitempty"`
	// Schema names the version of the service's schema the worker was
	// built with: its id in the service's schemas hash (SchemaID).
	Schema string `json:"schema,omitempty"`
	// RetentionMs is how long the worker keeps a Finished record of each
	// unary call it answers (ms); absent when it keeps none, as workers of
	// releases before it do not.
	RetentionMs int64 `json:"retention_ms,omitempty"`
	// MaxDeadLetters is the cap the worker keeps each dead-letter stream
	// of the service under (ServerOptions.MaxDeadLetters); absent when it
	// keeps none, as workers of releases before it do not.
	MaxDeadLetters int64 `json:"max_dead_letters,omitempty"`
	// AsyncFastPath says the worker knows that an async request taken
	// over without a state hash may have run (its first attempt runs on
	// the fast path: its delivery is its claim); absent in records of
	// workers of releases before it, which would run such a request again
	// as one that never ran. A worker runs async requests on the fast path
	// only while every worker recorded for the service says so.
	AsyncFastPath bool `json:"async_fast_path,omitempty"`
}

// Serves reports whether the worker serves method (a method's short
// name); a record without Methods serves everything.
func (w Worker) Serves(method string) bool {
	return w.Methods == nil || slices.Contains(w.Methods, method)
}

// Liveness: a server beats every BeatInterval; a worker whose last beat is
// within LiveWindow of Redis's time is live (five missed beats, so a GC
// pause or a slow Redis does not make a healthy server look dead); a
// record silent for PruneAge is removed by the next beat into its hash.
const (
	BeatInterval = time.Second
	LiveWindow   = 5 * time.Second
	PruneAge     = time.Minute
	// Retention is how long a service's registry (its workers hash and
	// schemas) outlives its last worker's beat: a service with no worker
	// for that long disappears from tools.
	Retention = 24 * time.Hour
)

// SchemaID names one version of a service's schema: the first 16 hex
// digits of the SHA-256 of its FileDescriptorSet as published.
func SchemaID(set []byte) string {
	sum := sha256.Sum256(set)
	return hex.EncodeToString(sum[:8])
}

// ParseWorker reads a worker record; false when it is not one.
func ParseWorker(raw string) (Worker, bool) {
	var w Worker
	if json.Unmarshal([]byte(raw), &w) != nil {
		return Worker{}, false
	}
	return w, true
}

// LiveAt reports whether the worker counts as live at Redis time nowMs:
// its last beat is at most LiveWindow before nowMs. (The beat is compared,
// not subtracted from nowMs: a record's beat_ms of -2^63 overflowed that
// difference into a worker live for good.)
func (w Worker) LiveAt(nowMs int64) bool {
	return w.BeatMs >= nowMs-LiveWindow.Milliseconds()
}

// LiveByLane counts the live workers of a workers hash at Redis time nowMs,
// by lane ("" counts as defaultLane). Records that do not parse do not
// count.
func LiveByLane(hash map[string]string, nowMs int64, defaultLane string) map[string]int {
	return ReadRoster(hash, nowMs, defaultLane).Live
}

// Roster is what one read of a service's workers hash says: who is live,
// by lane, and, for a caller told nobody is, whether any worker ever beat
// there and how long ago the last one did.
type Roster struct {
	Live map[string]int // live workers by lane
	// Known counts the records that parse, live or not (a record is
	// pruned a PruneAge after its last beat); Latest is the latest beat
	// among them (Redis unix ms) and LatestWorker the worker that sent it.
	Known        int
	Latest       int64
	LatestWorker string
	At           int64 // the Redis time of the read (unix ms)
}

// ReadRoster reads a workers hash at Redis time nowMs, counting live
// workers by lane ("" counts as defaultLane). Records that do not parse
// count nowhere.
func ReadRoster(hash map[string]string, nowMs int64, defaultLane string) Roster {
	r := Roster{Live: map[string]int{}, At: nowMs}
	for id, raw := range hash {
		w, ok := ParseWorker(raw)
		if !ok {
			continue
		}
		r.Known++
		if r.Known == 1 || w.BeatMs > r.Latest {
			r.Latest, r.LatestWorker = w.BeatMs, id
		}
		if !w.LiveAt(nowMs) {
			continue
		}
		lane := w.Lane
		if lane == "" {
			lane = defaultLane
		}
		r.Live[lane]++
	}
	return r
}

// Silence is how long before the read the last beat came (0 with no
// record, or a beat stamped after the read).
func (r Roster) Silence() time.Duration {
	if r.Known == 0 || r.Latest >= r.At {
		return 0
	}
	return time.Duration(r.At-r.Latest) * time.Millisecond
}
