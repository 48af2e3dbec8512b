package tunnel

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// RequestTrace is everything Redis still knows about one request, for
// `rpr trace`: its state hash, its stream entry (while not yet answered),
// the stored answer and dead letters. State lives until 10s after the
// deadline, so a trace is for recent requests.
type RequestTrace struct {
	ID      RequestID
	Service string
	// Shard is the shard of the service that knows the request, of Shards
	// (the service's recorded count; 1 when it is not sharded).
	Shard, Shards int
	// Lane is the lane whose stream or retry set holds the request, or
	// that dead-lettered it; "" when Redis no longer says (the request is
	// done, and only its state is left).
	Lane string
	// State is the state machine's state; "" when Redis has no state
	// for the request (never reached a worker nor timed out, or expired).
	State          string
	Worker         string
	PreviousWorker string // set when the request was taken over from a dead worker
	Attempt        string
	Entry          string // request stream entry id
	// Claimed, Done and Marked are when a worker claimed it, when it was
	// answered and when it was marked TIMEOUT/CANCELLED; zero when not.
	Claimed, Done, Marked time.Time
	LeaseUntil            time.Time
	ExpiresIn             time.Duration
	// Answer is the stored final response (SUCCESS or FAILED).
	Answer *TraceAnswer
	// Queued is the request's stream entry while it is still in the
	// stream (waiting or running), found among its first deadLetterScan
	// entries.
	Queued *TraceEntry
	// DeadLetters are dead-letter entries of the request, from the newest
	// deadLetterScan entries of the dead-letter stream.
	DeadLetters []TraceDeadLetter
	// Async requests only: Key is the idempotency key (whose state the
	// trace shows, when found), and Retry the request's entry in the retry
	// set while it waits for a retry or its scheduled time.
	Key   string
	Retry *TraceRetry
}

// TraceRetry is an async request waiting in the retry set.
type TraceRetry struct {
	Due     time.Time
	Attempt int
}

// TraceAnswer is a stored response.
type TraceAnswer struct {
	Code    Code
	Message string
	Bytes   int
}

// TraceEntry is a request stream entry.
type TraceEntry struct {
	ID     string
	Method string
	// Enqueued is when it was sent; Deadline when its caller stops
	// waiting (zero for async requests, which have none).
	Enqueued time.Time
	Deadline time.Time
	Header   Metadata
}

// TraceDeadLetter is a dead-letter entry of the request.
type TraceDeadLetter struct {
	// ID is the entry's DeadLetter.EntryID, as `rpr dlq` takes it.
	ID     string
	Time   time.Time
	Reason string
}

// deadLetterScan bounds how many entries TraceRequest reads from each
// request stream, retry set and dead-letter stream.
const deadLetterScan = 10000

// TraceRequest looks request id up under prefix ("" for DefaultPrefix).
// With service "" it tries every service ListServices finds; the id itself
// does not name its service, nor its shard or lane. In each service it
// looks in every shard, one pipelined round trip per shard until one
// knows the request: its state hash, the request streams and retry sets of
// every lane (the default lane, the lanes routes name and those of the
// service's workers), and the dead-letter stream.
func TraceRequest(ctx context.Context, rdb redis.UniversalClient, prefix, service, id string) (*RequestTrace, error) {
	rid, err := ParseRequestID(id)
	if err != nil {
		return nil, err
	}
	keys := store.NewKeyspace(orDefaultPrefix(prefix))
	candidates := []string{service}
	if service == "" {
		if candidates, err = ListServices(ctx, rdb, keys.Prefix()); err != nil {
			return nil, err
		}
	}
	tr := &RequestTrace{ID: rid}
	for _, svc := range candidates {
		if err := traceIn(ctx, rdb, keys, svc, id, tr); err != nil {
			return nil, err
		}
		if tr.Service != "" {
			return tr, nil
		}
	}
	return tr, nil
}

// traceIn fills tr when service knows request id, looking in each of its
// shards in turn.
func traceIn(ctx context.Context, rdb redis.UniversalClient, keys store.Keyspace, service, id string, tr *RequestTrace) error {
	view, err := readServiceView(ctx, rdb, keys, service)
	if err != nil {
		return fmt.Errorf("rpr: trace %s in %s: %w", id, service, err)
	}
	lanes := inspectedLanes(view.routes.Lanes(), view.beats)
	shards := view.shards
	for shard := range shards {
		found, err := traceInShard(ctx, rdb, keys, service, shard, lanes, id, tr)
		if err != nil || found {
			tr.Shards = shards
			return err
		}
	}
	return nil
}

// traceInShard fills tr and reports true when shard of service knows
// request id.
func traceInShard(ctx context.Context, rdb redis.UniversalClient, keys store.Keyspace, service string, shard int, lanes []string, id string, tr *RequestTrace) (bool, error) {
	sk := keys.Shard(service, shard)
	stateKey := sk.State(id)
	pipe := rdb.Pipeline()
	state := pipe.HGetAll(ctx, stateKey)
	ttl := pipe.PTTL(ctx, stateKey)
	dlq := pipe.XRevRangeN(ctx, sk.DeadLetters(), "+", "-", deadLetterScan)
	queued := make([]*redis.XMessageSliceCmd, len(lanes))
	retrying := make([]*redis.ZSliceCmd, len(lanes))
	for i, lane := range lanes {
		queued[i] = pipe.XRangeN(ctx, sk.Requests(lane), "-", "+", deadLetterScan)
		retrying[i] = pipe.ZRangeWithScores(ctx, sk.Retries(lane), 0, deadLetterScan-1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("rpr: trace %s in %s (shard %d): %w", id, service, shard, err)
	}
	// An async request's state is named by its idempotency key, which its
	// envelope (queued, retrying or dead-lettered) tells.
	key, lane := "", ""
	noteKey := func(env *wire.Request) {
		if env.Kind == wire.KindAsync {
			key = env.Key
		}
	}
	var deadLetters []TraceDeadLetter
	for _, m := range dlq.Val() {
		raw, _ := m.Values[wire.Field].(string)
		if rid, _ := wire.PeekReplyAddress([]byte(raw)); rid == id {
			reason, _ := m.Values["reason"].(string)
			ms, _ := streamIDMillis(m.ID)
			deadLetters = append(deadLetters, TraceDeadLetter{ID: deadLetterID(shard, m.ID), Time: time.UnixMilli(ms), Reason: reason})
			if l, _ := m.Values["lane"].(string); l != "" && lane == "" {
				lane = l // the newest dead letter's
			}
			if env, err := wire.DecodeRequestString(raw); err == nil {
				noteKey(env)
			}
		}
	}
	var entry *TraceEntry
	var retry *TraceRetry
	for i := range lanes {
		for _, m := range queued[i].Val() {
			raw, _ := m.Values[wire.Field].(string)
			if rid, _ := wire.PeekReplyAddress([]byte(raw)); rid != id {
				continue
			}
			if env, err := wire.DecodeRequestString(raw); err == nil {
				entry = &TraceEntry{ID: m.ID, Method: env.Method, Enqueued: unixMillis(env.Enqueued),
					Deadline: unixMillis(env.Deadline), Header: env.Header}
				lane = lanes[i]
				noteKey(env)
			}
		}
		for _, z := range retrying[i].Val() {
			raw, _ := z.Member.(string)
			if rid, _ := wire.PeekReplyAddress([]byte(raw)); rid != id {
				continue
			}
			if env, err := wire.DecodeRequestString(raw); err == nil {
				retry = &TraceRetry{Due: time.UnixMilli(int64(z.Score)), Attempt: env.Attempt}
				lane = lanes[i]
				noteKey(env)
			}
		}
	}
	st := state.Val()
	if key != "" && key != id {
		stateKey = sk.State(key)
		pipe := rdb.Pipeline()
		state, ttl = pipe.HGetAll(ctx, stateKey), pipe.PTTL(ctx, stateKey)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return false, fmt.Errorf("rpr: trace %s in %s (shard %d): %w", id, service, shard, err)
		}
		st = state.Val()
	}
	if len(st) == 0 && len(deadLetters) == 0 && entry == nil && retry == nil {
		return false, nil
	}
	tr.Service, tr.Shard, tr.Lane, tr.Key = service, shard, lane, key
	tr.DeadLetters, tr.Queued, tr.Retry = deadLetters, entry, retry
	tr.State, tr.Worker, tr.PreviousWorker = st["state"], st["worker"], st["previous_worker"]
	tr.Attempt, tr.Entry = st["attempt"], st["entry"]
	tr.Claimed, tr.Done, tr.Marked = millisField(st["claimed_ms"]), millisField(st["done_ms"]), millisField(st["marked_ms"])
	tr.LeaseUntil = millisField(st["lease"])
	if d := ttl.Val(); d > 0 {
		tr.ExpiresIn = d
	}
	if raw := st["resp"]; raw != "" {
		if resp, err := wire.DecodeResponseString(raw); err == nil {
			tr.Answer = &TraceAnswer{Code: Code(resp.Code), Message: resp.Message, Bytes: len(resp.Payload)}
		}
	}
	return true, nil
}

func millisField(s string) time.Time {
	ms, _ := strconv.ParseInt(s, 10, 64)
	return unixMillis(ms)
}

// unixMillis is the time of unix ms, or the zero time when ms is not
// positive (unset).
func unixMillis(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
