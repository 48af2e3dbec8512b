package tunnel

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
)

// DeadLetterQueue reads and manages one service's dead letters: the async
// requests that failed their last attempt (or failed permanently), and
// entries no server could decode. It is what `rpr dlq` drives; nothing in
// it runs on the hot path. Entries stay until replayed or dropped: rpr
// never trims the dead-letter streams, so watch their length (the
// rpr.dlq.length gauge) and alert on growth.
//
// Each shard of a service has its own dead-letter stream (all lanes of the
// shard share it); a DeadLetterQueue covers all the shards recorded for
// the service (ShardCount), listing their letters merged by failure time.
type DeadLetterQueue struct {
	rdb     redis.UniversalClient
	keys    store.Keyspace
	service string
}

// NewDeadLetterQueue returns the dead-letter queue of service under prefix
// ("" for DefaultPrefix).
func NewDeadLetterQueue(rdb redis.UniversalClient, prefix, service string) *DeadLetterQueue {
	return &DeadLetterQueue{rdb: rdb, keys: store.NewKeyspace(orDefaultPrefix(prefix)), service: service}
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
	// it again; DefaultLane when the entry does not say (entries no server
	// could decode, and those written before lanes were recorded).
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

	envelope *wire.Request
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

// streamIDPattern matches a stream entry id, or its time part alone.
var streamIDPattern = regexp.MustCompile(`^[0-9]+(-[0-9]+)?$`)

// ErrBadDeadLetterID is wrapped by the error for an id that is no dead
// letter id.
var ErrBadDeadLetterID = errors.New("not a dead letter id")

// ParseDeadLetterID splits a DeadLetter.EntryID into its shard and its id
// in that shard's dead-letter stream: "1764434400123-0" is shard 0's,
// "2/1764434400123-0" shard 2's ("0/..." is accepted for shard 0). The
// stream id may omit its sequence number ("1764434400123"), as Redis
// allows.
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
		if n >= MaxShards {
			return bad(fmt.Sprintf("shard %d is out of range (a service has at most %d shards)", n, MaxShards))
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

// shards returns the service's recorded shard count.
func (q *DeadLetterQueue) shards(ctx context.Context) (int, error) {
	return ShardCount(ctx, q.rdb, q.keys.Prefix(), q.service)
}

// Streams returns the keys of the service's dead-letter streams, one per
// recorded shard, shard 0's first.
func (q *DeadLetterQueue) Streams(ctx context.Context) ([]string, error) {
	n, err := q.shards(ctx)
	if err != nil {
		return nil, err
	}
	keys := make([]string, n)
	for shard := range n {
		keys[shard] = q.keys.Shard(q.service, shard).DeadLetters()
	}
	return keys, nil
}

// Len returns how many dead letters the service has, over all its shards.
func (q *DeadLetterQueue) Len(ctx context.Context) (int64, error) {
	keys, err := q.Streams(ctx)
	if err != nil {
		return 0, err
	}
	pipe := q.rdb.Pipeline()
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
// for all).
func (q *DeadLetterQueue) List(ctx context.Context, filter DeadLetterFilter, limit int) ([]DeadLetter, error) {
	var out []DeadLetter
	err := q.scan(ctx, filter, func(dl DeadLetter) bool {
		out = append(out, dl)
		return limit <= 0 || len(out) < limit
	})
	return out, err
}

// dlqCursor pages through one shard's dead-letter stream for scan.
type dlqCursor struct {
	shard int
	key   string
	buf   []redis.XMessage
	start string // XRANGE start of the next page; "" when read to the end
}

// page takes the result of reading the cursor's next page.
func (c *dlqCursor) page(msgs []redis.XMessage) {
	c.buf = msgs
	c.start = ""
	if len(msgs) == dlqPage {
		c.start = "(" + msgs[len(msgs)-1].ID
	}
}

// scan calls fn with each dead letter that passes filter, oldest first,
// until fn returns false. Each shard's stream is in the order its letters
// failed (entries are added as they fail); scan merges the shards' streams
// by failure time (the failed_ms field, stamped with Redis's clock; the
// entry id's time for entries without one), ties going to the lower shard.
func (q *DeadLetterQueue) scan(ctx context.Context, filter DeadLetterFilter, fn func(DeadLetter) bool) error {
	keys, err := q.Streams(ctx)
	if err != nil {
		return err
	}
	pipe := q.rdb.Pipeline()
	timeCmd := pipe.Time(ctx)
	cursors := make([]*dlqCursor, len(keys))
	first := make([]*redis.XMessageSliceCmd, len(keys))
	for shard, key := range keys {
		cursors[shard] = &dlqCursor{shard: shard, key: key}
		first[shard] = pipe.XRangeN(ctx, key, "-", "+", dlqPage)
	}
	_, _ = pipe.Exec(ctx)
	now, err := timeCmd.Result()
	if err != nil {
		return fmt.Errorf("rpr: read Redis time: %w", err)
	}
	for shard, cmd := range first {
		msgs, err := cmd.Result()
		if err != nil {
			return fmt.Errorf("rpr: read %s: %w", keys[shard], err)
		}
		cursors[shard].page(msgs)
	}
	for {
		var next *dlqCursor
		for _, c := range cursors {
			if len(c.buf) == 0 && c.start != "" {
				msgs, err := q.rdb.XRangeN(ctx, c.key, c.start, "+", dlqPage).Result()
				if err != nil {
					return fmt.Errorf("rpr: read %s: %w", c.key, err)
				}
				c.page(msgs)
			}
			if len(c.buf) > 0 && (next == nil || failedBefore(c.buf[0], next.buf[0])) {
				next = c
			}
		}
		if next == nil {
			return nil
		}
		m := next.buf[0]
		next.buf = next.buf[1:]
		dl := parseDeadLetter(m, next.shard, next.key)
		if filter.matches(&dl, now) && !fn(dl) {
			return nil
		}
	}
}

// failedBefore reports whether dead-letter entry a failed before b (of
// another shard).
func failedBefore(a, b redis.XMessage) bool {
	return failedMillis(a) < failedMillis(b)
}

// failedMillis is when a dead-letter entry failed, in Redis unix ms: its
// failed_ms field, else the time in its entry id.
func failedMillis(m redis.XMessage) int64 {
	if raw, _ := m.Values["failed_ms"].(string); raw != "" {
		if ms, err := strconv.ParseInt(raw, 10, 64); err == nil && ms > 0 {
			return ms
		}
	}
	ms, _ := streamIDMillis(m.ID)
	return ms
}

// ErrNoDeadLetter is returned by Get for an entry the service does not have.
var ErrNoDeadLetter = errors.New("no such dead letter")

// Get returns one dead letter by its entry id (DeadLetter.EntryID: "id" or
// "shard/id") or by its request id. An entry id names its shard, so Get
// finds it also in a shard beyond the recorded count (left there when the
// count was lowered).
func (q *DeadLetterQueue) Get(ctx context.Context, id string) (DeadLetter, error) {
	shard, streamID, err := ParseDeadLetterID(id)
	if err == nil {
		key := q.keys.Shard(q.service, shard).DeadLetters()
		msgs, err := q.rdb.XRangeN(ctx, key, streamID, streamID, 1).Result()
		if err != nil {
			return DeadLetter{}, fmt.Errorf("rpr: read %s entry %s: %w", key, streamID, err)
		}
		if len(msgs) == 0 {
			return DeadLetter{}, fmt.Errorf("rpr: %s has no entry %s: %w", key, streamID, ErrNoDeadLetter)
		}
		return parseDeadLetter(msgs[0], shard, key), nil
	}
	if _, reqErr := ParseRequestID(id); reqErr != nil {
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
		return DeadLetter{}, fmt.Errorf("rpr: %s has no dead letter of request %s: %w", q.service, id, ErrNoDeadLetter)
	}
	return *found, nil
}

// parseDeadLetter reads entry m of shard's dead-letter stream key; fields
// it lacks stay zero.
func parseDeadLetter(m redis.XMessage, shard int, key string) DeadLetter {
	str := func(field string) string { s, _ := m.Values[field].(string); return s }
	num := func(field string) int64 { n, _ := strconv.ParseInt(str(field), 10, 64); return n }
	dl := DeadLetter{
		EntryID:  deadLetterID(shard, m.ID),
		Shard:    shard,
		Stream:   key,
		StreamID: m.ID,
		Lane:     laneOrDefault(str("lane")),
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
	env, err := wire.DecodeRequestString(str(wire.Field))
	if err != nil {
		dl.DecodeError = err.Error()
		dl.RequestID, _ = wire.PeekReplyAddress([]byte(str(wire.Field)))
		dl.Method = str("method")
		return dl
	}
	dl.envelope = env
	dl.RequestID, dl.Method, dl.Async = env.ID, env.Method, env.Kind == wire.KindAsync
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
	// Skipped cannot be replayed (not async, undecodable, or in a shard
	// no server reads any more), by entry id with the reason; they stay in
	// the dead-letter stream.
	Skipped map[string]string
	// Rerouted counts, by the lane they were dead-lettered in, the letters
	// queued in the default lane instead, because their lane has no live
	// server any more (its requests would wait there for one that may
	// never come). They are counted in Replayed, AlreadySucceeded or Gone
	// too.
	Rerouted map[string]int
}

// replayBatch is how many dead letters one run of replayScript moves.
const replayBatch = 100

// replayTarget is where a batch of replayed letters goes: one shard's
// dead-letter stream and one of its lanes' request stream.
type replayTarget struct {
	shard int
	lane  string
}

// Replay queues dead letters again, each atomically with its removal from
// its dead-letter stream, so a crash mid-way neither loses nor duplicates
// one. Attempts start over at 1 and the replay is counted in the envelope.
//
// A letter goes back to the shard it came from (where its idempotency
// key's state is) and to the lane it was dead-lettered in, unless that
// lane has no live server now: then to the default lane, counted in
// ReplayResult.Rerouted. Letters of a shard beyond the recorded count are
// skipped: no server reads that shard any more.
//
// progress, when not nil, is called after each batch with how many of
// letters have been dealt with.
func (q *DeadLetterQueue) Replay(ctx context.Context, letters []DeadLetter, progress func(done int)) (ReplayResult, error) {
	res := ReplayResult{Skipped: map[string]string{}, Rerouted: map[string]int{}}
	view, err := readServiceView(ctx, q.rdb, q.keys, q.service)
	if err != nil {
		return res, fmt.Errorf("rpr: replay dead letters of %s: %w", q.service, err)
	}
	now, shards, live := view.now, view.shards, view.live()

	batches := map[replayTarget][]DeadLetter{}
	var order []replayTarget // targets in order of first use, for a stable flush order
	done := 0
	flush := func(to replayTarget) error {
		batch := batches[to]
		if len(batch) == 0 {
			return nil
		}
		sk := q.keys.Shard(q.service, to.shard)
		call := store.NewReplay(sk, sk.Requests(to.lane))
		for _, dl := range batch {
			env := wireForm(dl.envelope)
			env.Attempt, env.Replays, env.Enqueued = 1, env.Replays+1, now.UnixMilli()
			raw, err := wire.EncodeRequest(env)
			if err != nil {
				return err
			}
			call.Add(dl.StreamID, sk.State(dl.envelope.Key), raw)
		}
		store.Run(ctx, q.rdb, &call.Call)
		out, err := call.Result()
		if err != nil {
			return fmt.Errorf("rpr: replay dead letters of %s (shard %d, lane %s): %w", q.service, to.shard, to.lane, err)
		}
		for _, verdict := range out {
			switch verdict {
			case store.Replayed:
				res.Replayed++
			case store.Succeeded:
				res.AlreadySucceeded++
			default:
				res.Gone++
			}
		}
		done += len(batch)
		batches[to] = batch[:0]
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
		case dl.Shard >= shards:
			res.Skipped[dl.EntryID] = fmt.Sprintf("it is in shard %d, but %s has %d shard(s) now, so no server would read it there; raise the shard count to %d or more (`rpr shards set`) to replay it, or drop it", dl.Shard, q.service, shards, dl.Shard+1)
		default:
			lane := laneOrDefault(dl.Lane)
			if lane != DefaultLane && live[lane] == 0 {
				res.Rerouted[lane]++
				lane = DefaultLane
			}
			to := replayTarget{shard: dl.Shard, lane: lane}
			if _, seen := batches[to]; !seen {
				order = append(order, to)
			}
			batches[to] = append(batches[to], dl)
			if len(batches[to]) == replayBatch {
				if err := flush(to); err != nil {
					return res, err
				}
			}
			continue
		}
		done++
	}
	for _, to := range order {
		if err := flush(to); err != nil {
			return res, err
		}
	}
	if progress != nil {
		progress(done)
	}
	return res, nil
}

// Drop deletes dead letters by entry id (DeadLetter.EntryID) and returns
// how many were there. It checks every id first and deletes nothing when
// one is malformed. progress, when not nil, is called after each batch
// with how many ids have been dealt with.
func (q *DeadLetterQueue) Drop(ctx context.Context, entryIDs []string, progress func(done int)) (int64, error) {
	type located struct {
		shard    int
		streamID string
	}
	ids := make([]located, len(entryIDs))
	for i, id := range entryIDs {
		shard, streamID, err := ParseDeadLetterID(id)
		if err != nil {
			return 0, err
		}
		ids[i] = located{shard, streamID}
	}
	var dropped int64
	for start := 0; start < len(ids); start += replayBatch {
		end := min(start+replayBatch, len(ids))
		byShard := map[int][]string{}
		var shards []int
		for _, id := range ids[start:end] {
			if _, seen := byShard[id.shard]; !seen {
				shards = append(shards, id.shard)
			}
			byShard[id.shard] = append(byShard[id.shard], id.streamID)
		}
		pipe := q.rdb.Pipeline()
		dels := make([]*redis.IntCmd, len(shards))
		for i, shard := range shards {
			dels[i] = pipe.XDel(ctx, q.keys.Shard(q.service, shard).DeadLetters(), byShard[shard]...)
		}
		_, _ = pipe.Exec(ctx)
		for i, cmd := range dels {
			if err := cmd.Err(); err != nil {
				return dropped, fmt.Errorf("rpr: drop dead letters from %s: %w", q.keys.Shard(q.service, shards[i]).DeadLetters(), err)
			}
			dropped += cmd.Val()
		}
		if progress != nil {
			progress(end)
		}
	}
	return dropped, nil
}
