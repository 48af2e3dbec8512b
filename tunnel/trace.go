package tunnel

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequestTrace is everything Redis still knows about one request, for
// `rpr trace`: its state hash, its stream entry (while not yet answered),
// the stored answer and dead letters. State lives until 10s after the
// deadline, so a trace is for recent requests.
type RequestTrace struct {
	ID      RequestID
	Service string
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
	ID       string
	Method   string
	Enqueued time.Time
	Deadline time.Time
	Header   Metadata
}

// TraceDeadLetter is a dead-letter entry of the request.
type TraceDeadLetter struct {
	ID     string
	Time   time.Time
	Reason string
}

// deadLetterScan bounds how many entries TraceRequest reads from a
// service's request stream and its dead-letter stream.
const deadLetterScan = 10000

// TraceRequest looks request id up under prefix ("" for DefaultPrefix).
// With service "" it tries every service ListServices finds; the id itself
// does not name its service.
func TraceRequest(ctx context.Context, rdb redis.UniversalClient, prefix, service, id string) (*RequestTrace, error) {
	rid, err := ParseRequestID(id)
	if err != nil {
		return nil, err
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	keys := keyspace{prefix: prefix}
	candidates := []string{service}
	if service == "" {
		if candidates, err = ListServices(ctx, rdb, prefix); err != nil {
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

// traceIn fills tr when service knows request id.
func traceIn(ctx context.Context, rdb redis.UniversalClient, keys keyspace, service, id string, tr *RequestTrace) error {
	stateKey := keys.shard(service, 0).state(id)
	pipe := rdb.Pipeline()
	state := pipe.HGetAll(ctx, stateKey)
	ttl := pipe.PTTL(ctx, stateKey)
	dlq := pipe.XRevRangeN(ctx, keys.shard(service, 0).deadLetters(), "+", "-", deadLetterScan)
	queued := pipe.XRangeN(ctx, keys.shard(service, 0).requests(""), "-", "+", deadLetterScan)
	retrying := pipe.ZRangeWithScores(ctx, keys.shard(service, 0).retries(""), 0, deadLetterScan-1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("rpr: trace %s in %s: %w", id, service, err)
	}
	// An async request's state is named by its idempotency key, which its
	// envelope (queued, retrying or dead-lettered) tells.
	noteKey := func(env *requestEnvelope) {
		if env.Kind == kindAsync {
			tr.Key = env.Key
		}
	}
	for _, m := range dlq.Val() {
		raw, _ := m.Values[envelopeField].(string)
		if rid, _ := peekReplyAddress([]byte(raw)); rid == id {
			reason, _ := m.Values["reason"].(string)
			ms, _ := streamIDMillis(m.ID)
			tr.DeadLetters = append(tr.DeadLetters, TraceDeadLetter{ID: m.ID, Time: time.UnixMilli(ms), Reason: reason})
			if env, err := decodeRequest([]byte(raw)); err == nil {
				noteKey(env)
			}
		}
	}
	for _, m := range queued.Val() {
		raw, _ := m.Values[envelopeField].(string)
		if rid, _ := peekReplyAddress([]byte(raw)); rid != id {
			continue
		}
		if env, err := decodeRequest([]byte(raw)); err == nil {
			tr.Queued = &TraceEntry{ID: m.ID, Method: env.Method, Enqueued: time.UnixMilli(env.Enqueued),
				Deadline: time.UnixMilli(env.Deadline), Header: env.Header}
			noteKey(env)
		}
	}
	for _, z := range retrying.Val() {
		raw, _ := z.Member.(string)
		if rid, _ := peekReplyAddress([]byte(raw)); rid != id {
			continue
		}
		if env, err := decodeRequest([]byte(raw)); err == nil {
			tr.Retry = &TraceRetry{Due: time.UnixMilli(int64(z.Score)), Attempt: env.Attempt}
			noteKey(env)
		}
	}
	st := state.Val()
	if tr.Key != "" && tr.Key != id {
		stateKey = keys.shard(service, 0).state(tr.Key)
		pipe := rdb.Pipeline()
		state, ttl = pipe.HGetAll(ctx, stateKey), pipe.PTTL(ctx, stateKey)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("rpr: trace %s in %s: %w", id, service, err)
		}
		st = state.Val()
	}
	if len(st) == 0 && len(tr.DeadLetters) == 0 && tr.Queued == nil && tr.Retry == nil {
		return nil
	}
	tr.Service = service
	tr.State, tr.Worker, tr.PreviousWorker = st["state"], st["worker"], st["previous_worker"]
	tr.Attempt, tr.Entry = st["attempt"], st["entry"]
	tr.Claimed, tr.Done, tr.Marked = millisField(st["claimed_ms"]), millisField(st["done_ms"]), millisField(st["marked_ms"])
	tr.LeaseUntil = millisField(st["lease"])
	if d := ttl.Val(); d > 0 {
		tr.ExpiresIn = d
	}
	if raw := st["resp"]; raw != "" {
		if resp, err := decodeResponse([]byte(raw)); err == nil {
			tr.Answer = &TraceAnswer{Code: resp.Code, Message: resp.Message, Bytes: len(resp.Payload)}
		}
	}
	return nil
}

func millisField(s string) time.Time {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
