package tunnel

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Server side of async requests: what happens after a handler returns
// (done, retry later, or dead-letter), the mover that brings due retries
// and delayed requests back to the stream, and the janitor that trims
// request streams.

// DefaultIdempotencyWindow is how long a server remembers that an async
// request's idempotency key succeeded, so that a second request or
// delivery with that key is not run again.
const DefaultIdempotencyWindow = 24 * time.Hour

// defaultAsyncTimeout bounds an async attempt's handler when neither the
// call nor the method sets a timeout.
const defaultAsyncTimeout = 30 * time.Second

// moveBatch is the most due requests one run of moveDueScript moves.
const moveBatch = 256

// janitorInterval is how often each server tidies each request stream.
const janitorInterval = 10 * time.Second

// staleConsumerIdle is how long a consumer (a worker of an earlier process)
// with nothing pending stays in the consumer group before the janitor
// forgets it.
const staleConsumerIdle = time.Hour

// asyncTimeout is the time limit of one attempt of an async request: the
// caller's WithTimeout, else the method's timeout, else 30s.
func asyncTimeout(env *requestEnvelope, method *MethodDesc) time.Duration {
	switch {
	case env.Timeout > 0:
		return time.Duration(env.Timeout) * time.Millisecond
	case method != nil && method.Timeout > 0:
		return method.Timeout
	}
	return defaultAsyncTimeout
}

// asyncOutcome decides what becomes of an async request after an attempt:
// done on success; otherwise another attempt after a backoff when its
// policy allows, or the dead-letter stream with the reason.
func (r *serveRun) asyncOutcome(q *queue, req *received, resp *responseEnvelope, handlerErr error, d beginDecision, log *requestLogger) *completion {
	s, env := r.server, req.env
	window := s.opts.IdempotencyWindow
	if resp.Code == OK {
		return &completion{action: "done", final: stateSuccess, ttl: window}
	}
	if handlerErr == nil {
		handlerErr = resp.asError()
	}
	respRaw, _ := marshalEnvelope(resp) // a response envelope always encodes
	policy := asyncPolicy(env, req.method)
	if d.what != "orphan" && policy.retriesAsync(handlerErr, env.Attempt) {
		next := wireForm(env)
		next.Attempt++
		raw, err := marshalEnvelope(next)
		if err == nil {
			backoff := policy.backoff(env.Attempt)
			log.Warn("rpr: async request failed; will retry", "attempt", env.Attempt, "of", policy.MaxAttempts, "after", backoff, "code", resp.Code, "error", resp.Message)
			return &completion{action: "retry", target: q.retries, final: stateFailed, ttl: window,
				resp: respRaw, env: raw, extra: strconv.FormatInt(max(backoff.Milliseconds(), 1), 10)}
		}
		log.Error("rpr: encode retry envelope; dead-lettering instead", "error", err)
	}
	reason := deadLetterReason(handlerErr, resp.Code, env.Attempt, policy, d)
	log.Error("rpr: async request dead-lettered", "reason", reason, "attempt", env.Attempt, "code", resp.Code, "error", resp.Message)
	original, err := marshalEnvelope(wireForm(env))
	if err != nil {
		log.Error("rpr: encode dead letter", "error", err)
	}
	fields, _ := json.Marshal([]string{
		"reason", reason,
		"code", resp.Code.String(),
		"error", resp.Message,
		"id", env.ID,
		"key", env.Key,
		"method", env.Method,
		"attempts", strconv.Itoa(env.Attempt),
		"replays", strconv.Itoa(env.Replays),
		"enqueued_ms", strconv.FormatInt(env.Enqueued, 10),
		"worker", s.opts.WorkerID,
		"lane", s.opts.Lane, // q's lane: where a replay queues it again
	})
	return &completion{action: "dead", target: q.keys.deadLetters(), final: stateDead, ttl: window,
		resp: respRaw, env: original, extra: string(fields)}
}

// wireForm returns a copy of env as it travels: without the idempotency
// key when that is the request id.
func wireForm(env *requestEnvelope) *requestEnvelope {
	out := *env
	if out.Key == out.ID {
		out.Key = ""
	}
	return &out
}

// deadLetterReason says in a few words why a request was dead-lettered.
func deadLetterReason(err error, code Code, attempt int, p RetryPolicy, d beginDecision) string {
	switch {
	case d.what == "orphan":
		return fmt.Sprintf("outcome unknown: worker %s died while running it and the method is not idempotent", d.detail)
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
	keys := []string{q.retries, q.requests}
	backoff := newBackoff(50*time.Millisecond, 2*time.Second)
	for {
		wait := s.opts.RetryPollInterval
		runCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := moveDueScript.Run(runCtx, s.rdb, keys, moveBatch).Int64Slice()
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil || len(res) != 2:
			s.log.Warn("rpr: move due retries", "service", q.name, "error", err)
			backoff.wait(ctx)
			continue
		}
		backoff.reset()
		if res[0] > 0 {
			s.log.Debug("rpr: moved due async requests to the queue", "service", q.name, "count", res[0])
		}
		switch {
		case res[0] == moveBatch:
			wait = 0
		case res[1] >= 0:
			wait = min(wait, time.Duration(res[1])*time.Millisecond)
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
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
		res, err := janitorScript.Run(runCtx, s.rdb, []string{q.requests}, staleConsumerIdle.Milliseconds()).Int64Slice()
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("rpr: tidy request stream", "stream", q.requests, "error", err)
			}
			continue
		}
		if len(res) == 2 && (res[0] > 0 || res[1] > 0) {
			s.log.Debug("rpr: tidied request stream", "stream", q.requests, "trimmed", res[0], "consumers_forgotten", res[1])
		}
	}
}
