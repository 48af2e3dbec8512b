package tunnel

import (
	"context"
	"fmt"
	"time"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// Server side of async requests: what happens after a handler returns
// (done, retry later, or dead-letter), the mover that brings due retries
// and delayed requests back to the stream, and the janitor that trims
// request streams.

// moveBatch is the most due requests one run of moveDueScript moves.
const moveBatch = 256

// idleMoveFactor is how many RetryPollIntervals the mover waits while a
// retry set is empty: an idle server's mover costs Redis a run a second
// (four commands) rather than four.
const idleMoveFactor = 4

// janitorInterval is how often each server tidies each request stream.
const janitorInterval = 10 * time.Second

// staleConsumerIdle is how long a consumer (a worker of an earlier process)
// with nothing pending stays in the consumer group before the janitor
// forgets it.
const staleConsumerIdle = time.Hour

// asyncTimeout is the time limit of one attempt of an async request: the
// caller's WithTimeout (at most MaxAsyncTimeout), else the method's
// timeout, else 30s.
func asyncTimeout(env *wire.Request, method *MethodDesc) time.Duration {
	switch {
	case env.Timeout > 0:
		return boundedMillis(env.Timeout, MaxAsyncTimeout)
	case method != nil && method.Timeout > 0:
		return method.Timeout
	}
	return DefaultAsyncTimeout
}

// asyncOutcome decides what becomes of an async request after an attempt:
// done on success; otherwise another attempt after a backoff when its
// policy allows, or the dead-letter stream with the reason.
func (r *serveRun) asyncOutcome(q *queue, req *received, resp *wire.Response, handlerErr error, d store.Decision, log *requestLogger) *completion {
	s, env := r.server, req.env
	window := s.opts.IdempotencyWindow
	if Code(resp.Code) == OK {
		comp := &req.handling.outcome.completion
		*comp = completion{Completion: store.Completion{Action: store.ActionDone, Final: wire.StateSuccess, TTL: window}}
		return comp
	}
	if handlerErr == nil {
		handlerErr = responseError(resp)
	}
	respRaw, _ := wire.EncodeResponse(resp) // a response envelope always encodes
	policy := asyncPolicy(env, req.method)
	if d.Verdict != store.VerdictOrphan && policy.retriesAsync(handlerErr, env.Attempt) {
		next := wireForm(env)
		next.Attempt++
		raw, err := wire.EncodeRequest(next)
		if err == nil {
			backoff := policy.backoff(env.Attempt)
			log.Warn("rpr: async request failed; will retry", "attempt", env.Attempt, "of", policy.MaxAttempts, "after", backoff, "code", Code(resp.Code), "error", resp.Message)
			return &completion{Completion: store.Completion{Action: store.ActionRetry, Target: q.retries, Final: wire.StateFailed, TTL: window,
				Response: respRaw, Envelope: raw, Backoff: backoff}}
		}
		log.Error("rpr: encode retry envelope; dead-lettering instead", "error", err)
	}
	reason := deadLetterReason(handlerErr, Code(resp.Code), env.Attempt, policy, d)
	// logged once written (complete): the letter may be held instead
	original, err := wire.EncodeRequest(wireForm(env))
	if err != nil {
		log.Error("rpr: encode dead letter", "error", err)
	}
	hold, holdBackoff := r.holdFor(env, req.method)
	letter := wire.DeadLetter{
		Reason:     reason,
		Code:       Code(resp.Code).String(),
		Error:      resp.Message,
		ID:         env.ID,
		Key:        env.Key,
		Method:     env.Method,
		Attempts:   env.Attempt,
		Replays:    env.Replays,
		EnqueuedMs: env.Enqueued,
		Worker:     s.opts.WorkerID,
		Lane:       s.opts.Lane, // q's lane: where a replay queues it again
	}
	return &completion{Completion: store.Completion{Action: store.ActionDead, Target: q.keys.DeadLetters(), Final: wire.StateDead, TTL: window,
		Response: respRaw, Envelope: original, Letter: letter, Hold: hold, HoldBackoff: holdBackoff}}
}

// maxHoldBackoff bounds how long a held dead letter (its stream at the
// cap) waits before its request comes back to try again: room an operator
// makes is used within this long.
const maxHoldBackoff = time.Minute

// holdFor returns what a dead letter of env is held as while its stream is
// at its cap: the request's next attempt (a server of a release without
// holds runs it again rather than dropping it), due after the policy's
// longest backoff, at most maxHoldBackoff. The envelope is nil when it
// does not encode (then the letter is written whatever the cap).
func (r *serveRun) holdFor(env *wire.Request, method *MethodDesc) ([]byte, time.Duration) {
	next := wireForm(env)
	next.Attempt++
	raw, err := wire.EncodeRequest(next)
	if err != nil {
		return nil, 0
	}
	return raw, min(asyncPolicy(env, method).MaxBackoff, maxHoldBackoff)
}

// completeHeld dead-letters an async request the begin script found
// held (store.VerdictHeld) with the letter its state keeps, without
// running it; while the stream is still at its cap the request is held
// again.
func (r *serveRun) completeHeld(q *queue, req *received) {
	log := r.server.requestLog(req.env)
	// The letter's fields (attempts included) are the held ones; the
	// envelope is the request as it came back.
	hold, holdBackoff := r.holdFor(req.env, req.method)
	comp := &completion{Completion: store.Completion{Action: store.ActionDead, Target: q.keys.DeadLetters(), Final: wire.StateDead,
		TTL: r.server.opts.IdempotencyWindow, Envelope: []byte(req.raw), LetterHeld: true, Hold: hold, HoldBackoff: holdBackoff}}
	r.complete(q, req, comp, log)
}

// noteHeld records that a dead letter was held back at its stream's cap,
// for the log, ServerStats and rpr.server.dead_letters.held.
func (r *serveRun) noteHeld(q *queue, log interface{ Warn(string, ...any) }, what string) {
	s := r.server
	s.stats.deadLettersHeld.Add(1)
	r.metrics.deadLetterHeld(q.name)
	log.Warn("rpr: dead-letter stream is full (ServerOptions.MaxDeadLetters); "+what+": it is dead-lettered once there is room (see `rpr dlq ls`; `rpr dlq replay` or `rpr dlq drop` makes room)",
		"dlq", q.keys.DeadLetters(), "max_dead_letters", s.opts.MaxDeadLetters)
}

// wireForm returns a copy of env as it travels: without the idempotency
// key when that is the request id.
func wireForm(env *wire.Request) *wire.Request {
	out := *env
	if out.Key == out.ID {
		out.Key = ""
	}
	return &out
}

// deadLetterReason says in a few words why a request was dead-lettered.
func deadLetterReason(err error, code Code, attempt int, p RetryPolicy, d store.Decision) string {
	switch {
	case d.Verdict == store.VerdictOrphan:
		return fmt.Sprintf("outcome unknown: worker %s died while running it and the method is not idempotent", d.Detail)
	case IsPermanent(err):
		return "permanent error (tunnel.Permanent)"
	case attempt >= p.MaxAttempts:
		return fmt.Sprintf("attempts exhausted (%d of %d)", attempt, p.MaxAttempts)
	case len(p.RetryableCodes) > 0:
		return fmt.Sprintf("code %s is not in the retry policy's retryable codes", code)
	}
	return fmt.Sprintf("code %s is not retryable", code)
}

// moveDue brings q's due retries and delayed requests to its request
// stream until ctx ends: every RetryPollInterval, or sooner when the next
// one is due sooner, and at once again while there is a backlog of due
// entries.
func (r *serveRun) moveDue(ctx context.Context, q *queue) {
	s := r.server
	backoff := newBackoff(50*time.Millisecond, 2*time.Second)
	for {
		wait := s.opts.RetryPollInterval
		runCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		call := store.NewMoveDue(q.retries, q.requests, moveBatch)
		call.Use(s.dialect)
		store.Run(runCtx, s.rdb, &call.Call)
		moved, next, err := call.Result()
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.log.Warn("rpr: move due retries", "service", q.name, "error", err)
			backoff.wait(ctx)
			continue
		}
		backoff.reset()
		if moved > 0 {
			s.log.Debug("rpr: moved due async requests to the queue", "service", q.name, "count", moved)
		}
		switch {
		case moved == moveBatch:
			wait = 0
		case next >= 0:
			wait = min(wait, next)
		default:
			// Nothing waits: look less often. A retry this server writes
			// wakes the mover at once (retryAdded); another server's is
			// that server's to move, and a delayed request a client adds
			// is moved within idleMoveFactor polls.
			wait *= idleMoveFactor
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-q.retryAdded:
			case <-time.After(wait):
			}
		}
	}
}

// tidy runs janitorScript on q's request stream every janitorInterval
// until ctx ends.
func (r *serveRun) tidy(ctx context.Context, q *queue) {
	s := r.server
	t := time.NewTicker(janitorInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		runCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		call := store.NewJanitor(q.requests, staleConsumerIdle)
		call.Use(s.dialect)
		store.Run(runCtx, s.rdb, &call.Call)
		trimmed, forgotten, err := call.Result()
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("rpr: tidy request stream", "stream", q.requests, "error", err)
			}
			continue
		}
		if trimmed > 0 || forgotten > 0 {
			s.log.Debug("rpr: tidied request stream", "stream", q.requests, "trimmed", trimmed, "consumers_forgotten", forgotten)
		}
	}
}
