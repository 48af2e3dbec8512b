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
// the stored answer, dead letters, and the record its server kept when it
// finished. A unary call's state lives until 10s after its deadline; its
// finished record, only kept when its servers set
// tunnel.ServerOptions.Retention, that long after it finished. An async
// request's state is kept for the servers' idempotency window after its
// last attempt.
type RequestTrace struct {
	// ID is the request id, parsed. For a trace by idempotency key it is
	// the request Redis names under the key (in its state, or a queued,
	// retrying or dead-lettered envelope), zero when none is named.
	ID tunnel.RequestID
	// ByKey reports that the trace was asked for an idempotency key (what
	// was given did not parse as a request id); Key is that key.
	ByKey bool
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
	// TIMEOUT, CANCELLED, DEAD); when only the finished record is left,
	// SUCCESS or FAILED as it tells; "" when Redis has neither (never
	// reached a worker nor timed out, or expired).
	State string
	// Worker is the worker that runs or ran it; PreviousWorker the one it
	// was taken over from, when its first worker died.
	Worker         string
	PreviousWorker string
	// Attempt is the attempt being run, as the state hash records it.
	Attempt string
	// Held reports an async request whose dead letter waits for room in
	// its service's full dead-letter stream (wire.StateHeld): it is in the
	// retry set, not run again, and is dead-lettered once there is room.
	Held bool
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
	// Finished is the record the server kept of a unary call it answered,
	// when it keeps them (tunnel.ServerOptions.Retention); nil when there
	// is none.
	Finished *TraceFinished
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
	// KeyHeldBy is, for a trace by request id, the request whose outcome
	// the key's state holds when that is another one: a request sent later
	// with the same key (after this one was dead-lettered); "" otherwise.
	KeyHeldBy string
	// Retry is an async request's entry in the retry set while it waits
	// for a retry or its scheduled time.
	Retry *TraceRetry
	// Stream counts the messages of a streaming call once it ended; nil
	// for other calls, and for a stream still open.
	Stream *TraceStream
	// Retention is how long the servers of Service keep finished unary
	// calls (tunnel.ServerOptions.Retention), the longest any of its
	// worker records tells; 0 when none keeps them. RetentionPartial
	// reports that some of its workers keep none (retention off, or a
	// release before Retention), so a call they answered left no record.
	Retention        time.Duration
	RetentionPartial bool
	// Searched lists the services looked in that do not know the request,
	// with how long each keeps finished unary calls: when no service knows
	// it, why a finished unary call left nothing.
	Searched []TraceSearched

	// arg is the request id or key the trace is for, as given.
	arg string
}

// TraceFinished is the record a server kept of a unary call it answered
// (tunnel.ServerOptions.Retention): never its payload.
type TraceFinished struct {
	// Method is the method's short name; Worker the worker that ran it.
	Method string
	Worker string
	// Started and Done are when its handler started and returned.
	Started, Done time.Time
	// Code and Message are the answer's status (the message cut to 256
	// bytes); Bytes the size of its payload.
	Code    tunnel.Code
	Message string
	Bytes   int
	// ExpiresIn is how long the record has left.
	ExpiresIn time.Duration
}

// TraceSearched is a service a trace looked in.
type TraceSearched struct {
	Service string
	// Retention is how long its servers keep finished unary calls (the
	// longest any worker record tells); 0 when they keep none. Partial
	// reports that some of its workers keep none; NoWorkers that it has no
	// worker record at all (every server stopped), so what they kept is
	// not known.
	Retention time.Duration
	Partial   bool
	NoWorkers bool
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

// maxKeyBytes bounds idempotency keys (as tunnel.WithIdempotencyKey does).
const maxKeyBytes = 256

// Trace looks a request up in the service: by request id, or, when
// idOrKey does not parse as one, by the idempotency key of an async
// request (RequestTrace.ByKey). The id does not tell the service
// (Client.Trace tries every service). It looks in every shard, one
// pipelined round trip per shard until one knows the request (after one
// for the service's view): its state hash and finished record, the
// request streams and retry sets of every lane (the default lane, the
// lanes routes name and those of the service's workers), and the
// dead-letter stream. When the service does not know it, the trace has
// only ID (or Key) and Searched set (Service is ""). The error is for an
// argument that is neither (an empty string, or over 256 bytes) and for
// Redis failing.
func (s *Service) Trace(ctx context.Context, idOrKey string) (*RequestTrace, error) {
	tr, err := newTrace(idOrKey)
	if err != nil {
		return nil, err
	}
	if err := s.traceInto(ctx, tr); err != nil {
		return nil, err
	}
	return tr, nil
}

// newTrace starts the trace of arg: a request id when it parses as one,
// else an idempotency key.
func newTrace(arg string) (*RequestTrace, error) {
	if rid, err := tunnel.ParseRequestID(arg); err == nil {
		return &RequestTrace{ID: rid, arg: arg}, nil
	}
	if arg == "" || len(arg) > maxKeyBytes {
		return nil, fmt.Errorf("rpr: trace %q: neither a request id (YYYYMMDD-BIZ4-<unix ms>-<random>) nor an idempotency key (1 to %d bytes)", arg, maxKeyBytes)
	}
	return &RequestTrace{ByKey: true, Key: arg, arg: arg}, nil
}

// traceInto fills tr when the service knows its request, looking in each
// of its shards in turn (for a key, its shard first), and adds the
// service to tr.Searched when it does not.
func (s *Service) traceInto(ctx context.Context, tr *RequestTrace) error {
	view, err := s.view(ctx)
	if err != nil {
		return fmt.Errorf("rpr: trace %s in %s: %w", tr.arg, s.name, err)
	}
	lanes := knownLanes(view.routes.Lanes(), view.beats)
	retention, partial := view.retention()
	noWorkers := len(view.beats) == 0
	order := make([]int, 0, view.shards)
	if tr.ByKey {
		// An async request goes to its key's shard (of the count then).
		order = append(order, wire.ShardOfKey(tr.Key, view.shards))
	}
	for shard := range view.shards {
		if len(order) == 0 || shard != order[0] {
			order = append(order, shard)
		}
	}
	for _, shard := range order {
		found, err := s.traceInShard(ctx, shard, lanes, tr)
		if err != nil || found {
			tr.Shards, tr.Retention, tr.RetentionPartial = view.shards, retention, partial && retention > 0
			return err
		}
	}
	tr.Searched = append(tr.Searched, TraceSearched{Service: s.name, Retention: retention, Partial: partial && retention > 0, NoWorkers: noWorkers})
	return nil
}

// retention is how long the service's servers keep finished unary calls:
// the longest any worker record tells (a record of a worker that died
// since still tells what its calls were kept for), and whether some
// worker keeps none (its record has no retention_ms: retention off, or a
// release before it).
func (v serviceView) retention() (time.Duration, bool) {
	var longest int64
	partial := false
	for _, raw := range v.beats {
		if w, ok := wire.ParseWorker(raw); ok {
			longest = max(longest, w.RetentionMs)
			partial = partial || w.RetentionMs <= 0
		}
	}
	return time.Duration(longest) * time.Millisecond, partial
}

// traceInShard fills tr and reports true when shard of the service knows
// tr's request.
func (s *Service) traceInShard(ctx context.Context, shard int, lanes []string, tr *RequestTrace) (bool, error) {
	sk := s.keys.Shard(s.name, shard)
	id, key := tr.arg, ""
	if tr.ByKey {
		id, key = "", tr.Key
	}
	stateKey := sk.State(tr.arg)
	pipe := s.rdb.Pipeline()
	state := pipe.HGetAll(ctx, stateKey)
	ttl := pipe.PTTL(ctx, stateKey)
	var record *redis.StringCmd
	var recordTTL *redis.DurationCmd
	if !tr.ByKey {
		record, recordTTL = pipe.Get(ctx, sk.Done(id)), pipe.PTTL(ctx, sk.Done(id))
	}
	dlq := pipe.XRevRangeN(ctx, sk.DeadLetters(), "+", "-", traceScan)
	queued := make([]*redis.XMessageSliceCmd, len(lanes))
	retrying := make([]*redis.ZSliceCmd, len(lanes))
	for i, lane := range lanes {
		queued[i] = pipe.XRangeN(ctx, sk.Requests(lane), "-", "+", traceScan)
		retrying[i] = pipe.ZRangeWithScores(ctx, sk.Retries(lane), 0, traceScan-1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("rpr: trace %s in %s (shard %d): %w", tr.arg, s.name, shard, err)
	}
	// match reports whether an envelope is the request's, decoded (nil
	// when it does not decode: then only a request id can match it).
	match := func(raw string) (*wire.Request, bool) {
		if !tr.ByKey {
			if rid, _ := wire.PeekReplyAddress([]byte(raw)); rid != id {
				return nil, false
			}
			env, _ := wire.DecodeRequestString(raw)
			return env, true
		}
		env, err := wire.DecodeRequestString(raw)
		return env, err == nil && env.Kind == wire.KindAsync && env.Key == key
	}
	// An async request's state is named by its idempotency key, which its
	// envelope (queued, retrying or dead-lettered) or its finished record
	// tells; a trace by key learns the request id the same way.
	lane, foundID := "", ""
	noteEnvelope := func(env *wire.Request) {
		if env == nil {
			return
		}
		if env.Kind == wire.KindAsync && key == "" {
			key = env.Key
		}
		if foundID == "" {
			foundID = env.ID
		}
	}
	var deadLetters []TraceDeadLetter
	for _, m := range dlq.Val() {
		raw, _ := m.Values[wire.Field].(string)
		env, ok := match(raw)
		if !ok {
			continue
		}
		rec := wire.ParseDeadLetter(m.Values)
		ms, _ := streamIDMillis(m.ID)
		deadLetters = append(deadLetters, TraceDeadLetter{ID: deadLetterID(shard, m.ID), Time: time.UnixMilli(ms), Reason: rec.Reason})
		if rec.Lane != "" && lane == "" {
			lane = rec.Lane // the newest dead letter's
		}
		noteEnvelope(env)
	}
	var entry *TraceEntry
	var retry *TraceRetry
	for i := range lanes {
		for _, m := range queued[i].Val() {
			raw, _ := m.Values[wire.Field].(string)
			if env, ok := match(raw); ok && env != nil {
				entry = &TraceEntry{ID: m.ID, Method: env.Method, Enqueued: unixMillis(env.Enqueued),
					Deadline: unixMillis(env.Deadline), Header: tunnel.Metadata(env.Header)}
				lane = lanes[i]
				noteEnvelope(env)
			}
		}
		for _, z := range retrying[i].Val() {
			raw, _ := z.Member.(string)
			if env, ok := match(raw); ok && env != nil {
				retry = &TraceRetry{Due: time.UnixMilli(int64(z.Score)), Attempt: env.Attempt}
				lane = lanes[i]
				noteEnvelope(env)
			}
		}
	}
	var finished *TraceFinished
	keptRecord := false
	if record != nil {
		if f, ok := wire.ParseFinished(record.Val()); ok {
			keptRecord = true
			if key == "" {
				key = f.Key
			}
			if f.Worker != "" || f.DoneMs != 0 {
				finished = &TraceFinished{Method: f.Method, Worker: f.Worker, Started: unixMillis(f.StartedMs), Done: unixMillis(f.DoneMs),
					Code: tunnel.Code(f.Code), Message: f.Message, Bytes: f.Bytes, ExpiresIn: max(recordTTL.Val(), 0)}
			}
		}
	}
	st := state.Val()
	if !tr.ByKey && key != "" && key != id {
		stateKey = sk.State(key)
		pipe := s.rdb.Pipeline()
		state, ttl = pipe.HGetAll(ctx, stateKey), pipe.PTTL(ctx, stateKey)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return false, fmt.Errorf("rpr: trace %s in %s (shard %d): %w", tr.arg, s.name, shard, err)
		}
		st = state.Val()
	}
	if len(st) == 0 && len(deadLetters) == 0 && entry == nil && retry == nil && !keptRecord {
		return false, nil
	}
	tr.Service, tr.Shard, tr.Lane, tr.Key = s.name, shard, lane, key
	tr.DeadLetters, tr.Queued, tr.Retry, tr.Finished = deadLetters, entry, retry, finished
	tr.State, tr.Worker, tr.PreviousWorker = st[wire.StateField], st[wire.StateWorker], st[wire.StatePreviousWorker]
	tr.Attempt, tr.Entry = st[wire.StateAttempt], st[wire.StateEntry]
	tr.Held = st[wire.StateHeld] != ""
	tr.Claimed, tr.Done, tr.Marked = millisField(st[wire.StateClaimedMs]), millisField(st[wire.StateDoneMs]), millisField(st[wire.StateMarkedMs])
	tr.LeaseUntil = millisField(st[wire.StateLease])
	if d := ttl.Val(); d > 0 && len(st) > 0 {
		tr.ExpiresIn = d
	}
	if holder := st[wire.StateID]; holder != "" {
		if tr.ByKey {
			foundID = holder // the key's own word beats an envelope's
		} else if holder != id {
			tr.KeyHeldBy = holder
		}
	}
	if tr.ByKey && foundID != "" {
		tr.ID, _ = tunnel.ParseRequestID(foundID)
	}
	if tr.State == "" && finished != nil {
		tr.State = wire.StateSuccess
		if finished.Code != tunnel.OK {
			tr.State = wire.StateFailed
		}
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
