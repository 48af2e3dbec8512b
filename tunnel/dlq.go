package tunnel

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DeadLetterQueue reads and manages one service's dead-letter stream: the
// async requests that failed their last attempt (or failed permanently),
// and entries no server could decode. It is what `rpr dlq` drives; nothing
// in it runs on the hot path. Entries stay until replayed or dropped: rpr
// never trims the dead-letter stream, so watch its length (the
// rpr.queue.dead_letters gauge) and alert on growth.
type DeadLetterQueue struct {
	rdb     redis.UniversalClient
	keys    keyspace
	service string
}

// NewDeadLetterQueue returns the dead-letter queue of service under prefix
// ("" for DefaultPrefix).
func NewDeadLetterQueue(rdb redis.UniversalClient, prefix, service string) *DeadLetterQueue {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &DeadLetterQueue{rdb: rdb, keys: keyspace{prefix: prefix}, service: service}
}

// DeadLetter is one entry of a dead-letter stream.
type DeadLetter struct {
	// EntryID is the dead letter's id in the dead-letter stream; replay
	// and drop take it.
	EntryID string
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
	Code   Code
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
	Header  Metadata
	Payload []byte
	// DecodeError says why the envelope does not decode, when it does not.
	DecodeError string

	envelope *requestEnvelope
}

// DeadLetterFilter selects dead letters; the zero value selects all.
type DeadLetterFilter struct {
	// Method matches the full method ("pkg.Svc/Method") or its short name.
	Method string
	// Code matches the last status code, when not OK.
	Code Code
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
	if f.Code != OK && dl.Code != f.Code {
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

// dlqPage is how many entries one XRANGE of a scan reads.
const dlqPage = 500

// Len returns how many dead letters the service has.
func (q *DeadLetterQueue) Len(ctx context.Context) (int64, error) {
	n, err := q.rdb.XLen(ctx, q.keys.shard(q.service, 0).deadLetters()).Result()
	if err != nil {
		return 0, fmt.Errorf("rpr: length of %s: %w", q.keys.shard(q.service, 0).deadLetters(), err)
	}
	return n, nil
}

// List returns the dead letters that pass filter, oldest first, at most
// limit of them (0 for all).
func (q *DeadLetterQueue) List(ctx context.Context, filter DeadLetterFilter, limit int) ([]DeadLetter, error) {
	var out []DeadLetter
	err := q.scan(ctx, filter, func(dl DeadLetter) bool {
		out = append(out, dl)
		return limit <= 0 || len(out) < limit
	})
	return out, err
}

// scan calls fn with each dead letter that passes filter, oldest first,
// until fn returns false.
func (q *DeadLetterQueue) scan(ctx context.Context, filter DeadLetterFilter, fn func(DeadLetter) bool) error {
	key := q.keys.shard(q.service, 0).deadLetters()
	now, err := q.rdb.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("rpr: read Redis time: %w", err)
	}
	start := "-"
	for {
		msgs, err := q.rdb.XRangeN(ctx, key, start, "+", dlqPage).Result()
		if err != nil {
			return fmt.Errorf("rpr: read %s: %w", key, err)
		}
		for _, m := range msgs {
			dl := parseDeadLetter(m)
			if filter.matches(&dl, now) && !fn(dl) {
				return nil
			}
		}
		if len(msgs) < dlqPage {
			return nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

// ErrNoDeadLetter is returned by Get for an entry the stream does not have.
var ErrNoDeadLetter = errors.New("no such dead letter")

// Get returns one dead letter by its entry id, or by its request id.
func (q *DeadLetterQueue) Get(ctx context.Context, id string) (DeadLetter, error) {
	key := q.keys.shard(q.service, 0).deadLetters()
	if _, err := ParseRequestID(id); err != nil {
		msgs, err := q.rdb.XRangeN(ctx, key, id, id, 1).Result()
		if err != nil {
			return DeadLetter{}, fmt.Errorf("rpr: read %s entry %s: %w (pass an entry id such as 1764434400123-0, or a request id)", key, id, err)
		}
		if len(msgs) == 0 {
			return DeadLetter{}, fmt.Errorf("rpr: %s has no entry %s: %w", key, id, ErrNoDeadLetter)
		}
		return parseDeadLetter(msgs[0]), nil
	}
	var found *DeadLetter
	err := q.scan(ctx, DeadLetterFilter{}, func(dl DeadLetter) bool {
		if dl.RequestID == id {
			found = &dl
		}
		return found == nil
	})
	if err != nil {
		return DeadLetter{}, err
	}
	if found == nil {
		return DeadLetter{}, fmt.Errorf("rpr: %s has no dead letter of request %s: %w", key, id, ErrNoDeadLetter)
	}
	return *found, nil
}

// parseDeadLetter reads a dead-letter entry; fields it lacks stay zero.
func parseDeadLetter(m redis.XMessage) DeadLetter {
	str := func(field string) string { s, _ := m.Values[field].(string); return s }
	num := func(field string) int64 { n, _ := strconv.ParseInt(str(field), 10, 64); return n }
	dl := DeadLetter{
		EntryID:  m.ID,
		Error:    str("error"),
		Reason:   str("reason"),
		Attempts: int(num("attempts")),
		Replays:  int(num("replays")),
		Worker:   str("worker"),
		Key:      str("key"),
	}
	if code, ok := ParseCode(str("code")); ok {
		dl.Code = code
	}
	if ms := num("failed_ms"); ms > 0 {
		dl.Failed = time.UnixMilli(ms)
	}
	if ms := num("enqueued_ms"); ms > 0 {
		dl.Enqueued = time.UnixMilli(ms)
	}
	env, err := decodeRequest([]byte(str(envelopeField)))
	if err != nil {
		dl.DecodeError = err.Error()
		dl.RequestID, _ = peekReplyAddress([]byte(str(envelopeField)))
		dl.Method = str("method")
		return dl
	}
	dl.envelope = env
	dl.RequestID, dl.Method, dl.Async = env.ID, env.Method, env.Kind == kindAsync
	dl.Header, dl.Payload = env.Header, env.Payload
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

// ReplayResult counts what a replay did.
type ReplayResult struct {
	// Replayed were queued again, with attempts starting over at 1.
	Replayed int
	// AlreadySucceeded were dropped without running: another request with
	// the same idempotency key has succeeded since.
	AlreadySucceeded int
	// Gone were no longer in the dead-letter stream (replayed or dropped by
	// someone else meanwhile).
	Gone int
	// Skipped cannot be replayed (not async, or undecodable), by entry id
	// with the reason; they stay in the dead-letter stream.
	Skipped map[string]string
}

// replayBatch is how many dead letters one run of replayScript moves.
const replayBatch = 100

// Replay queues dead letters again, each atomically with its removal from
// the dead-letter stream, so a crash mid-way neither loses nor duplicates
// one. Attempts start over at 1 and the replay is counted in the envelope.
// progress, when not nil, is called after each batch with how many of
// letters have been dealt with.
func (q *DeadLetterQueue) Replay(ctx context.Context, letters []DeadLetter, progress func(done int)) (ReplayResult, error) {
	res := ReplayResult{Skipped: map[string]string{}}
	now, err := q.rdb.Time(ctx).Result()
	if err != nil {
		return res, fmt.Errorf("rpr: read Redis time: %w", err)
	}
	var batch []DeadLetter
	done := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		keys := []string{q.keys.shard(q.service, 0).deadLetters(), q.keys.shard(q.service, 0).requests("")}
		args := make([]any, 0, 2*len(batch))
		for _, dl := range batch {
			env := wireForm(dl.envelope)
			env.Attempt, env.Replays, env.Enqueued = 1, env.Replays+1, now.UnixMilli()
			raw, err := marshalEnvelope(env)
			if err != nil {
				return err
			}
			keys = append(keys, q.keys.shard(q.service, 0).state(dl.envelope.Key))
			args = append(args, dl.EntryID, raw)
		}
		out, err := replayScript.Run(ctx, q.rdb, keys, args...).StringSlice()
		if err != nil {
			return fmt.Errorf("rpr: replay dead letters of %s: %w", q.service, err)
		}
		for _, verdict := range out {
			switch verdict {
			case "replayed":
				res.Replayed++
			case "succeeded":
				res.AlreadySucceeded++
			default:
				res.Gone++
			}
		}
		done += len(batch)
		batch = batch[:0]
		if progress != nil {
			progress(done)
		}
		return nil
	}
	for _, dl := range letters {
		switch {
		case dl.envelope == nil:
			res.Skipped[dl.EntryID] = "its envelope does not decode (" + dl.DecodeError + "); drop it"
		case !dl.Async:
			res.Skipped[dl.EntryID] = "a unary request: its caller stopped waiting long ago; drop it"
		default:
			batch = append(batch, dl)
			if len(batch) == replayBatch {
				if err := flush(); err != nil {
					return res, err
				}
			}
			continue
		}
		done++
	}
	if err := flush(); err != nil {
		return res, err
	}
	if progress != nil {
		progress(done)
	}
	return res, nil
}

// Drop deletes dead letters by entry id and returns how many were there.
// progress, when not nil, is called after each batch with how many ids
// have been dealt with.
func (q *DeadLetterQueue) Drop(ctx context.Context, entryIDs []string, progress func(done int)) (int64, error) {
	key := q.keys.shard(q.service, 0).deadLetters()
	var dropped int64
	for start := 0; start < len(entryIDs); start += replayBatch {
		end := min(start+replayBatch, len(entryIDs))
		n, err := q.rdb.XDel(ctx, key, entryIDs[start:end]...).Result()
		if err != nil {
			return dropped, fmt.Errorf("rpr: drop dead letters from %s: %w", key, err)
		}
		dropped += n
		if progress != nil {
			progress(end)
		}
	}
	return dropped, nil
}
