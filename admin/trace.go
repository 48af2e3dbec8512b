package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// RequestTrace is everything Redis still knows about one request, for
// `rpr trace`: its state hash, its stream entry (while not yet answered),
// the stored answer and dead letters. State lives until 10s after the
// deadline, so a trace is for recent requests.
type RequestTrace struct {
	// ID is the request id, parsed.
	ID tunnel.RequestID
	// Service is the service that knows the request; "" when none does.
	Service string
	// Shard is the shard of the service that knows the request, of Shards
	// (the service's recorded count; 1 when it is not sharded).
	Shard, Shards int
	// Lane is the lane whose stream or retry set holds the request, or
	// that dead-lettered it; "" when Redis no longer says (the request is
	// done, and only its state is left).
	Lane string
	// State is the state machine's state (PROCESSING, SUCCESS, FAILED,
	// TIMEOUT, CANCELLED, DEAD); "" when Redis has no state for the
	// request (never reached a worker nor timed out, or expired).
	State string
	// Worker is the worker that runs or ran it; PreviousWorker the one it
	// was taken over from, when its first worker died.
	Worker         string
	PreviousWorker string
	// Attempt is the attempt being run, as the state hash records it.
	Attempt string
	// Entry is the request stream entry id being run.
	Entry string
	// Claimed, Done and Marked are when a worker claimed it, when it was
	// answered and when it was marked TIMEOUT/CANCELLED; zero when not.
	Claimed, Done, Marked time.Time
	// LeaseUntil is when the running worker's claim runs out unless it
	// extends it.
	LeaseUntil time.Time
	// ExpiresIn is how long the state hash has left; 0 when there is none.
	ExpiresIn time.Duration
	// Answer is the stored final response (SUCCESS or FAILED).
	Answer *TraceAnswer
	// Queued is the request's stream entry while it is still in the
	// stream (waiting or running), found among the stream's first 10,000
	// entries.
	Queued *TraceEntry
	// DeadLetters are dead-letter entries of the request, from the newest
	// 10,000 entries of the dead-letter stream.
	DeadLetters []TraceDeadLetter
	// Key is the idempotency key of an async request (whose state the
	// trace shows, when found).
	Key string
	// Retry is an async request's entry in the retry set while it waits
	// for a retry or its scheduled time.
	Retry *TraceRetry
	// Stream counts the messages of a streaming call once it ended; nil
	// for other calls, and for a stream still open.
	Stream *TraceStream
}

// TraceStream is what an ended streaming call exchanged.
type TraceStream struct {
	// Sent and Received count the messages the server sent and received.
	Sent, Received int64
}

// TraceRetry is an async request waiting in a retry set.
type TraceRetry struct {
	// Due is when it is queued again; Attempt the attempt it will be.
	Due     time.Time
	Attempt int
}

// TraceAnswer is a stored response.
type TraceAnswer struct {
	// Code and Message are its status; Bytes the size of its payload.
	Code    tunnel.Code
	Message string
	Bytes   int
}

// TraceEntry is a request stream entry.
type TraceEntry struct {
	// ID is the entry id; Method the full method called.
	ID     string
	Method string
	// Enqueued is when it was sent; Deadline when its caller stops
	// waiting (zero for async requests, which have none).
	Enqueued time.Time
	Deadline time.Time
	// Header is the request's metadata.
	Header tunnel.Metadata
}

// TraceDeadLetter is a dead-letter entry of the request.
type TraceDeadLetter struct {
	// ID is the entry's DeadLetter.EntryID, as `rpr dlq` takes it.
	ID string
	// Time is when it was dead-lettered; Reason why.
	Time   time.Time
	Reason string
}

// traceScan bounds how many entries a trace reads from each request
// stream, retry set and dead-letter stream.
const traceScan = 10000

// Trace looks request id up in the service, whose name the id does not
// tell (Client.Trace tries every service). It looks in every shard, one
// pipelined round trip per shard until one knows the request (after one
// for the service's view): its state hash, the request streams and retry
// sets of every lane (the default lane, the lanes routes name and those of
// the service's workers), and the dead-letter stream. When the service
// does not know it, the trace has only ID set (Service is ""). The error
// is for an id that does not parse and for Redis failing.
func (s *Service) Trace(ctx context.Context, id string) (*RequestTrace, error) {
	rid, err := tunnel.ParseRequestID(id)
	if err != nil {
		return nil, err
	}
	tr := &RequestTrace{ID: rid}
	if err := s.traceInto(ctx, id, tr); err != nil {
		return nil, err
	}
	return tr, nil
}

// traceInto fills tr when the service knows request id, looking in each of
// its shards in turn.
func (s *Service) traceInto(ctx context.Context, id string, tr *RequestTrace) error {
	view, err := s.view(ctx)
	if err != nil {
		return fmt.Errorf("rpr: trace %s in %s: %w", id, s.name, err)
	}
	lanes := knownLanes(view.routes.Lanes(), view.beats)
	for shard := range view.shards {
		found, err := s.traceInShard(ctx, shard, lanes, id, tr)
		if err != nil || found {
			tr.Shards = view.shards
			return err
		}
	}
	return nil
}

// traceInShard fills tr and reports true when shard of the service knows
// request id.
func (s *Service) traceInShard(ctx context.Context, shard int, lanes []string, id string, tr *RequestTrace) (bool, error) {
	sk := s.keys.Shard(s.name, shard)
	stateKey := sk.State(id)
	pipe := s.rdb.Pipeline()
	state := pipe.HGetAll(ctx, stateKey)
	ttl := pipe.PTTL(ctx, stateKey)
	dlq := pipe.XRevRangeN(ctx, sk.DeadLetters(), "+", "-", traceScan)
	queued := make([]*redis.XMessageSliceCmd, len(lanes))
	retrying := make([]*redis.ZSliceCmd, len(lanes))
	for i, lane := range lanes {
		queued[i] = pipe.XRangeN(ctx, sk.Requests(lane), "-", "+", traceScan)
		retrying[i] = pipe.ZRangeWithScores(ctx, sk.Retries(lane), 0, traceScan-1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("rpr: trace %s in %s (shard %d): %w", id, s.name, shard, err)
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
		if rid, _ := wire.PeekReplyAddress([]byte(raw)); rid != id {
			continue
		}
		rec := wire.ParseDeadLetter(m.Values)
		ms, _ := streamIDMillis(m.ID)
		deadLetters = append(deadLetters, TraceDeadLetter{ID: deadLetterID(shard, m.ID), Time: time.UnixMilli(ms), Reason: rec.Reason})
		if rec.Lane != "" && lane == "" {
			lane = rec.Lane // the newest dead letter's
		}
		if env, err := wire.DecodeRequestString(raw); err == nil {
			noteKey(env)
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
					Deadline: unixMillis(env.Deadline), Header: tunnel.Metadata(env.Header)}
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
		pipe := s.rdb.Pipeline()
		state, ttl = pipe.HGetAll(ctx, stateKey), pipe.PTTL(ctx, stateKey)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return false, fmt.Errorf("rpr: trace %s in %s (shard %d): %w", id, s.name, shard, err)
		}
		st = state.Val()
	}
	if len(st) == 0 && len(deadLetters) == 0 && entry == nil && retry == nil {
		return false, nil
	}
	tr.Service, tr.Shard, tr.Lane, tr.Key = s.name, shard, lane, key
	tr.DeadLetters, tr.Queued, tr.Retry = deadLetters, entry, retry
	tr.State, tr.Worker, tr.PreviousWorker = st[wire.StateField], st[wire.StateWorker], st[wire.StatePreviousWorker]
	tr.Attempt, tr.Entry = st[wire.StateAttempt], st[wire.StateEntry]
	tr.Claimed, tr.Done, tr.Marked = millisField(st[wire.StateClaimedMs]), millisField(st[wire.StateDoneMs]), millisField(st[wire.StateMarkedMs])
	tr.LeaseUntil = millisField(st[wire.StateLease])
	if d := ttl.Val(); d > 0 {
		tr.ExpiresIn = d
	}
	if sent, ok := st[wire.StateSent]; ok {
		tr.Stream = &TraceStream{}
		tr.Stream.Sent, _ = strconv.ParseInt(sent, 10, 64)
		tr.Stream.Received, _ = strconv.ParseInt(st[wire.StateReceived], 10, 64)
	}
	if raw := st[wire.StateResponse]; raw != "" {
		if resp, err := wire.DecodeResponseString(raw); err == nil {
			tr.Answer = &TraceAnswer{Code: tunnel.Code(resp.Code), Message: resp.Message, Bytes: len(resp.Payload)}
		}
	}
	return true, nil
}

// millisField reads a state hash's time field (Redis unix ms); zero when
// unset.
func millisField(s string) time.Time {
	ms, _ := strconv.ParseInt(s, 10, 64)
	return unixMillis(ms)
}
