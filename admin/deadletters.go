package admin

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// DeadLetters reads and manages one service's dead letters: the async
// requests that failed their last attempt (or failed permanently), and
// entries no server could decode. It is what `rpr dlq` drives. Entries
// stay until replayed or dropped: rpr never trims the dead-letter streams,
// so watch their length (the rpr.dlq.length gauge of RegisterMetrics) and
// alert on growth.
//
// Each shard of a service has its own dead-letter stream (all lanes of the
// shard share it); DeadLetters covers all the shards recorded for the
// service (Service.Shards), listing their letters merged by failure time.
type DeadLetters struct {
	svc *Service
}

// DeadLetter is one entry of a dead-letter stream.
type DeadLetter struct {
	// EntryID names the dead letter for Get, Replay and Drop. Stream entry
	// ids are unique only within one stream, so it is the entry's id in
	// its shard's dead-letter stream ("1764434400123-0") for shard 0, the
	// only shard of an unsharded service, and "<shard>/<id>"
	// ("2/1764434400123-0") for the other shards (see ParseDeadLetterID).
	EntryID string
	// Shard is the shard whose dead-letter stream holds it, Stream that
	// stream's key and StreamID the entry's id in it.
	Shard    int
	Stream   string
	StreamID string
	// Lane is the lane whose server dead-lettered it, where Replay queues
	// it again; tunnel.DefaultLane when the entry does not say (entries no
	// server could decode, and those written before lanes were recorded).
	Lane string
	// RequestID, Key and Method identify the request; empty when its
	// envelope could not be decoded.
	RequestID string
	Key       string
	Method    string
	// Async is true for async requests, the only kind that can be
	// replayed (a unary caller is long gone).
	Async bool
	// Code, Error and Reason say why it is here: the last attempt's status
	// and message, and what sent it to the dead-letter stream.
	Code   tunnel.Code
	Error  string
	Reason string
	// Attempts is how many attempts ran; Replays how often an operator
	// replayed it before.
	Attempts int
	Replays  int
	// Enqueued is when the request was first queued, Failed when it was
	// dead-lettered (both on Redis's clock; zero when unknown).
	Enqueued time.Time
	Failed   time.Time
	// Worker is the worker that dead-lettered it.
	Worker string
	// Header and Payload are the request's metadata and protobuf payload.
	Header  tunnel.Metadata
	Payload []byte
	// DecodeError says why the envelope does not decode, when it does not.
	DecodeError string

	envelope *wire.Request
}

// DeadLetterFilter selects dead letters; the zero value selects all.
type DeadLetterFilter struct {
	// Method matches the full method ("pkg.Svc/Method") or its short name.
	Method string
	// Code matches the last status code, when not OK.
	Code tunnel.Code
	// OlderThan and NewerThan match by time since the entry was
	// dead-lettered, when positive.
	OlderThan time.Duration
	NewerThan time.Duration
}

// matches reports whether dl passes f at Redis time now.
func (f DeadLetterFilter) matches(dl *DeadLetter, now time.Time) bool {
	if f.Method != "" && dl.Method != f.Method && !strings.HasSuffix(dl.Method, "/"+f.Method) {
		return false
	}
	if f.Code != tunnel.OK && dl.Code != f.Code {
		return false
	}
	age := now.Sub(dl.Failed)
	if f.OlderThan > 0 && (dl.Failed.IsZero() || age < f.OlderThan) {
		return false
	}
	if f.NewerThan > 0 && (dl.Failed.IsZero() || age > f.NewerThan) {
		return false
	}
	return true
}

// ErrBadDeadLetterID is wrapped by the error for an id that is no dead
// letter id.
var ErrBadDeadLetterID = errors.New("not a dead letter id")

// ErrNoDeadLetter is wrapped by the error DeadLetters.Get returns for an
// entry the service does not have.
var ErrNoDeadLetter = errors.New("no such dead letter")

// streamIDPattern matches a stream entry id, or its time part alone.
var streamIDPattern = regexp.MustCompile(`^[0-9]+(-[0-9]+)?$`)

// ParseDeadLetterID splits a DeadLetter.EntryID into its shard and its id
// in that shard's dead-letter stream: "1764434400123-0" is shard 0's,
// "2/1764434400123-0" shard 2's ("0/..." is accepted for shard 0). The
// stream id may omit its sequence number ("1764434400123"), as Redis
// allows. The error wraps ErrBadDeadLetterID and shows both forms.
func ParseDeadLetterID(id string) (shard int, streamID string, err error) {
	bad := func(why string) (int, string, error) {
		return 0, "", fmt.Errorf("rpr: dead letter id %q: %s; want an entry id as `rpr dlq ls` prints it: 1764434400123-0, or 2/1764434400123-0 for shard 2 of a sharded service: %w", id, why, ErrBadDeadLetterID)
	}
	streamID = id
	if prefix, rest, ok := strings.Cut(id, "/"); ok {
		n, convErr := strconv.Atoi(prefix)
		if convErr != nil || n < 0 || prefix != strconv.Itoa(n) {
			return bad(fmt.Sprintf("shard %q is not a number", prefix))
		}
		if n >= tunnel.MaxShards {
			return bad(fmt.Sprintf("shard %d is out of range (a service has at most %d shards)", n, tunnel.MaxShards))
		}
		shard, streamID = n, rest
	}
	if !streamIDPattern.MatchString(streamID) {
		return bad(fmt.Sprintf("%q is not a stream entry id", streamID))
	}
	return shard, streamID, nil
}

// deadLetterID is the EntryID of the entry streamID of shard.
func deadLetterID(shard int, streamID string) string {
	if shard == 0 {
		return streamID
	}
	return strconv.Itoa(shard) + "/" + streamID
}

// Streams returns the keys of the service's dead-letter streams, one per
// recorded shard, shard 0's first (one GET, for the shard count).
func (q *DeadLetters) Streams(ctx context.Context) ([]string, error) {
	n, err := q.svc.Shards(ctx)
	if err != nil {
		return nil, err
	}
	keys := make([]string, n)
	for shard, sk := range q.svc.keys.Shards(q.svc.name, 0, n) {
		keys[shard] = sk.DeadLetters()
	}
	return keys, nil
}

// Len returns how many dead letters the service has, over all its shards:
// two round trips (the shard count, then one XLEN per shard, pipelined).
func (q *DeadLetters) Len(ctx context.Context) (int64, error) {
	keys, err := q.Streams(ctx)
	if err != nil {
		return 0, err
	}
	pipe := q.svc.rdb.Pipeline()
	lens := make([]*redis.IntCmd, len(keys))
	for i, key := range keys {
		lens[i] = pipe.XLen(ctx, key)
	}
	_, _ = pipe.Exec(ctx)
	var total int64
	for i, cmd := range lens {
		if err := cmd.Err(); err != nil {
			return 0, fmt.Errorf("rpr: length of %s: %w", keys[i], err)
		}
		total += cmd.Val()
	}
	return total, nil
}

// List returns the dead letters that pass filter, oldest first (by the
// time they were dead-lettered, over all shards), at most limit of them (0
// for all). It reads the streams in pages of 500 entries per shard.
func (q *DeadLetters) List(ctx context.Context, filter DeadLetterFilter, limit int) ([]DeadLetter, error) {
	var out []DeadLetter
	err := q.scan(ctx, filter, func(dl DeadLetter) bool {
		out = append(out, dl)
		return limit <= 0 || len(out) < limit
	})
	return out, err
}

// Get returns one dead letter by its entry id (DeadLetter.EntryID: "id" or
// "shard/id"), in one XRANGE, or by its request id, scanning the streams.
// An entry id names its shard, so Get finds it also in a shard beyond the
// recorded count (left there when the count was lowered). The error wraps
// ErrNoDeadLetter when there is no such letter, and ErrBadDeadLetterID
// when id is neither kind of id.
func (q *DeadLetters) Get(ctx context.Context, id string) (DeadLetter, error) {
	shard, streamID, err := ParseDeadLetterID(id)
	if err == nil {
		key := q.svc.keys.Shard(q.svc.name, shard).DeadLetters()
		msgs, err := q.svc.rdb.XRangeN(ctx, key, streamID, streamID, 1).Result()
		if err != nil {
			return DeadLetter{}, fmt.Errorf("rpr: read %s entry %s: %w", key, streamID, err)
		}
		if len(msgs) == 0 {
			return DeadLetter{}, fmt.Errorf("rpr: %s has no entry %s: %w", key, streamID, ErrNoDeadLetter)
		}
		return parseDeadLetter(msgs[0], shard, key), nil
	}
	if _, reqErr := tunnel.ParseRequestID(id); reqErr != nil {
		return DeadLetter{}, fmt.Errorf("rpr: %q is neither a dead letter's entry id (1764434400123-0, or 2/1764434400123-0 in shard 2) nor a request id (20261129-ORD1-1764434400123-K7P2QXM4RT): %w", id, ErrBadDeadLetterID)
	}
	var found *DeadLetter
	err = q.scan(ctx, DeadLetterFilter{}, func(dl DeadLetter) bool {
		if dl.RequestID == id {
			found = &dl
		}
		return found == nil
	})
	if err != nil {
		return DeadLetter{}, err
	}
	if found == nil {
		return DeadLetter{}, fmt.Errorf("rpr: %s has no dead letter of request %s: %w", q.svc.name, id, ErrNoDeadLetter)
	}
	return *found, nil
}

// parseDeadLetter reads entry m of shard's dead-letter stream key; fields
// it lacks stay zero.
func parseDeadLetter(m redis.XMessage, shard int, key string) DeadLetter {
	rec := wire.ParseDeadLetter(m.Values)
	dl := DeadLetter{
		EntryID:  deadLetterID(shard, m.ID),
		Shard:    shard,
		Stream:   key,
		StreamID: m.ID,
		Lane:     store.LaneOrDefault(rec.Lane),
		Error:    rec.Error,
		Reason:   rec.Reason,
		Attempts: rec.Attempts,
		Replays:  rec.Replays,
		Worker:   rec.Worker,
		Key:      rec.Key,
		Enqueued: unixMillis(rec.EnqueuedMs),
		Failed:   unixMillis(failedField(m)),
	}
	if code, ok := tunnel.ParseCode(rec.Code); ok {
		dl.Code = code
	}
	raw, _ := m.Values[wire.Field].(string)
	env, err := wire.DecodeRequestString(raw)
	if err != nil {
		dl.DecodeError = err.Error()
		dl.RequestID, _ = wire.PeekReplyAddress([]byte(raw))
		dl.Method = rec.Method
		return dl
	}
	dl.envelope = env
	dl.RequestID, dl.Method, dl.Async = env.ID, env.Method, env.Kind == wire.KindAsync
	dl.Header, dl.Payload = tunnel.Metadata(env.Header), env.Payload
	if dl.Key == "" {
		dl.Key = env.Key
	}
	if dl.Attempts == 0 {
		dl.Attempts = env.Attempt
	}
	if dl.Enqueued.IsZero() && env.Enqueued > 0 {
		dl.Enqueued = time.UnixMilli(env.Enqueued)
	}
	return dl
}

// failedField is a dead-letter entry's failed_ms field (wire.DLFailedMs),
// 0 when absent or unreadable.
func failedField(m redis.XMessage) int64 {
	raw, _ := m.Values[wire.DLFailedMs].(string)
	ms, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || ms <= 0 {
		return 0
	}
	return ms
}

// failedMillis is when a dead-letter entry failed, in Redis unix ms: its
// failed_ms field, else the time in its entry id.
func failedMillis(m redis.XMessage) int64 {
	if ms := failedField(m); ms > 0 {
		return ms
	}
	ms, _ := streamIDMillis(m.ID)
	return ms
}
