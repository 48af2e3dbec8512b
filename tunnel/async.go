package tunnel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rprtunnel/rpr/internal/wire"
)

// Receipt is what Enqueue returns once an async request is durably in
// Redis: enough to find it again in logs, `rpr trace` and `rpr dlq`.
// `rpr trace` (admin.Service.Trace) takes either RequestID or
// IdempotencyKey, while the request waits or runs and, once it is done or
// dead, for the servers' ServerOptions.IdempotencyWindow.
type Receipt struct {
	// RequestID identifies this request (every attempt shares it).
	RequestID string
	// IdempotencyKey is the key the servers deduplicate on: the request id
	// unless the caller set one with WithIdempotencyKey.
	IdempotencyKey string
	// ProcessAt is when the request becomes due, on the local clock: now,
	// unless the caller asked for WithDelay or WithProcessAt.
	ProcessAt time.Time
}

// String formats r for logs: "request ID", then the idempotency key when
// the caller chose one, then when it is due ("rpr trace ID" finds it).
func (r Receipt) String() string {
	s := "request " + r.RequestID
	if r.IdempotencyKey != "" && r.IdempotencyKey != r.RequestID {
		s += " (idempotency key " + r.IdempotencyKey + ")"
	}
	if !r.ProcessAt.IsZero() {
		s += ", due " + r.ProcessAt.UTC().Format("2006-01-02T15:04:05.000Z")
	}
	return s
}

// DefaultAsyncRetryPolicy is how servers retry failed async requests when
// neither the method's (rpr.v1.method).retry option nor the call says
// otherwise: 8 attempts in all, 1s, 2s, 4s ... apart (±20%), at most 5
// minutes apart: about four minutes of trying before a request is
// dead-lettered. Every code is retried except the permanent ones (see
// Permanent).
var DefaultAsyncRetryPolicy = RetryPolicy{
	MaxAttempts:    8,
	InitialBackoff: time.Second,
	MaxBackoff:     5 * time.Minute,
	Multiplier:     2,
}

// permanentCodes are the codes that say retrying the same request cannot
// help, so a failed async request carrying one is dead-lettered at once
// (unless its policy lists the code as retryable).
var permanentCodes = map[Code]bool{
	InvalidArgument:    true,
	NotFound:           true,
	AlreadyExists:      true,
	PermissionDenied:   true,
	FailedPrecondition: true,
	OutOfRange:         true,
	Unimplemented:      true,
	Unauthenticated:    true,
}

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// Permanent marks err as not worth retrying: an async handler that returns
// Permanent(err) sends its request straight to the dead-letter stream,
// whatever its code and attempts left. Use it for failures that are in the
// request itself (a malformed order, an unknown customer).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err: err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// WithIdempotencyKey sets the key an async request is deduplicated by:
// however often requests with one key are enqueued or delivered, at most
// one succeeds within the servers' IdempotencyWindow (default 24h). The
// default key is the request id, which deduplicates redeliveries only.
// Keys are per service; up to 256 bytes.
func WithIdempotencyKey(key string) CallOption {
	return callOptionFunc(func(c *callConfig) { c.idempotencyKey = key })
}

// WithDelay makes an async request due d from now instead of at once.
func WithDelay(d time.Duration) CallOption {
	return callOptionFunc(func(c *callConfig) { c.processAt = time.Now().Add(d) })
}

// WithProcessAt makes an async request due at t instead of at once. Servers
// move due requests to the queue every ServerOptions.RetryPollInterval, so
// a request runs no earlier than t and usually within that interval of it.
func WithProcessAt(t time.Time) CallOption {
	return callOptionFunc(func(c *callConfig) { c.processAt = t })
}

// maxIdempotencyKeyBytes bounds idempotency keys, which are part of a key
// name in Redis.
const maxIdempotencyKeyBytes = 256

// Enqueue sends one async request and returns as soon as it is durably in
// Redis; it does not wait for a server. Generated clients call it for
// methods marked (rpr.v1.method).async. The request is retried by the
// servers when its handler fails (see DefaultAsyncRetryPolicy and
// Permanent) and dead-lettered after the last attempt.
//
// A refused request (the queue is at its backlog watermark) fails with
// RESOURCE_EXHAUSTED, NotExecuted, and a retry-after hint (RetryAfter).
// Any other error means the request may or may not be queued: enqueueing
// again with the same idempotency key (WithIdempotencyKey) is safe.
func (c *Client) Enqueue(ctx context.Context, method *MethodDesc, req proto.Message, opts ...CallOption) (_ Receipt, err error) {
	if err := checkUnary(method); err != nil {
		return Receipt{}, err
	}
	started := c.starts.get() // nothing keeps it once Enqueue returns
	ctx = c.startCallIn(ctx, started, method, opts)
	defer func() {
		err = withCall(err, started.full, started.rid)
		started.end(err)
		c.starts.put(started)
	}()
	cfg, full, rid := &started.cfg, started.full, started.rid
	receipt := Receipt{RequestID: rid, IdempotencyKey: cfg.idempotencyKey, ProcessAt: cfg.processAt}
	if receipt.IdempotencyKey == "" {
		receipt.IdempotencyKey = rid
	}
	if receipt.ProcessAt.IsZero() {
		receipt.ProcessAt = time.Now()
	}
	if err := c.checkAsync(method, full, rid, cfg, req); err != nil {
		return Receipt{}, err
	}
	if ctx.Err() != nil {
		return Receipt{}, notSent(ctx, full, rid, "before the request was enqueued")
	}
	if err := c.takeSlot(ctx, started); err != nil {
		return Receipt{}, err
	}
	defer c.slots.release()
	buf, err := c.marshalRequestPooled(started, req)
	if err != nil {
		return Receipt{}, err
	}
	defer c.buffers.Put(buf) // the envelope is a copy
	payload := *buf
	// Circuit breaker around Redis: fail at once while it is
	// down. No server is involved yet, so the service's breaker is not.
	pass, err := c.breakers.allowRedis(full, rid)
	if err != nil {
		return Receipt{}, err
	}
	defer func() {
		err = sentOrContextEnded(ctx, err, full, rid)
		pass.done(err)
	}()
	svc, err := c.service(ctx, method.Service.Name, method.Service.Shards)
	if err != nil {
		return Receipt{}, err
	}
	capacity := c.maxBacklog(method)
	if err = svc.admit(full, rid, capacity, c.opts.BacklogWatermark); err != nil {
		return Receipt{}, err
	}
	// Rate limits: one round trip when a rule applies, none otherwise.
	if err = c.limit(ctx, svc, full, rid, cfg.header); err != nil {
		return Receipt{}, err
	}
	env := &wire.Request{
		Version:  wire.Version,
		ID:       rid,
		Method:   full,
		Header:   cfg.header,
		Enqueued: c.clock.toRedis(time.Now()),
		Attempt:  1,
		Kind:     wire.KindAsync,
		Payload:  payload,
		Key:      cfg.idempotencyKey, // "" stands for the request id
		Retry:    wireRetry(cfg.retry),
	}
	if cfg.timeout > 0 {
		env.Timeout = cfg.timeout.Milliseconds()
	}
	envelope, err := c.encodeRequestPooled(env)
	if err != nil {
		return Receipt{}, notExecutedf(Internal, "%s [%s]: %v", full, rid, err)
	}
	// enqueue returns once its script has run, or once it is withdrawn.
	defer c.buffers.Put(envelope)

	var due int64 // 0: at once
	if time.Until(receipt.ProcessAt) > 0 {
		due = c.clock.toRedis(receipt.ProcessAt)
	}
	lane, shard := c.route(svc, method, cfg, cfg.idempotencyKey)
	if err := c.enqueue(ctx, svc, full, rid, lane, shard, capacity, due, *envelope); err != nil {
		return Receipt{}, err
	}
	return receipt, nil
}

// checkAsync refuses what can never be enqueued, before anything is sent.
func (c *Client) checkAsync(method *MethodDesc, full, rid string, cfg *callConfig, req proto.Message) error {
	switch {
	case !method.Async:
		return notExecutedf(FailedPrecondition, "%s [%s]: Enqueue of a method that is not async: call it with Invoke, or mark it (rpr.v1.method).async = true", full, rid)
	case req == nil:
		return notExecutedf(InvalidArgument, "%s [%s]: request is nil", full, rid)
	case len(cfg.idempotencyKey) > maxIdempotencyKeyBytes:
		return notExecutedf(InvalidArgument, "%s [%s]: idempotency key is %d bytes, over the %d-byte limit", full, rid, len(cfg.idempotencyKey), maxIdempotencyKeyBytes)
	case cfg.responseHeader != nil || cfg.trailer != nil:
		return notExecutedf(InvalidArgument, "%s [%s]: WithResponseHeader and WithTrailer do not apply to async calls (nobody waits for the response)", full, rid)
	}
	return nil
}

// enqueue writes one request through the client's enqueuer and turns the
// verdict into an error.
func (c *Client) enqueue(ctx context.Context, svc *clientService, full, rid, lane string, shard int, capacity, due int64, raw []byte) error {
	keys := svc.queueKeys(c.keys, shard, lane)
	item := c.enqueuings.get()
	*item = enqueuing{
		stream:   keys.requests,
		retries:  keys.retries,
		capacity: shareOfCap(capacity, int(svc.shards.count.Load())),
		due:      due,
		raw:      raw,
		written:  c.signals.get(),
	}
	err := c.enqueuer.submit(ctx, item)
	if errors.Is(err, errBatcherClosed) {
		return notExecutedf(Canceled, "%s [%s]: client closed", full, rid)
	}
	if err != nil {
		return notSent(ctx, full, rid, "before the request was enqueued")
	}
	select {
	case <-item.written:
	case <-ctx.Done():
		if item.state.CompareAndSwap(opQueued, opAbandoned) {
			// A flusher will still find item in its queue: it is left to
			// the collector.
			return notSent(ctx, full, rid, "before the request was enqueued")
		}
		<-item.written // already on its way: its outcome is what the caller must know
	}
	// The flusher's signal was its last use of item: both go back.
	res, itemCap := item.result, item.capacity
	c.signals.put(item.written)
	c.enqueuings.put(item)
	switch {
	case res.err != nil && neverRan(res.err):
		return notExecutedf(Unavailable, "%s [%s]: enqueue: %v (it was not queued: safe to retry)", full, rid, res.err)
	case res.err != nil:
		return &Error{code: Unavailable, message: fmt.Sprintf("%s [%s]: enqueue: %v (whether the request was queued is unknown; enqueueing again with the same idempotency key is safe)", full, rid, res.err), local: true}
	case !res.queued:
		return svc.refused(full, rid, res.backlog, itemCap, "at its cap")
	}
	return nil
}

// contextCode is the status code a context's end stands for.
func contextCode(ctx context.Context) Code {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return DeadlineExceeded
	}
	return Canceled
}

// wireRetry converts a caller's retry policy for the envelope.
func wireRetry(p *RetryPolicy) *wire.RetryPolicy {
	if p == nil {
		return nil
	}
	return &wire.RetryPolicy{
		MaxAttempts:    p.MaxAttempts,
		InitialBackoff: p.InitialBackoff.Milliseconds(),
		MaxBackoff:     p.MaxBackoff.Milliseconds(),
		Multiplier:     p.Multiplier,
		RetryableCodes: codesToWire(p.RetryableCodes),
	}
}

// codesToWire converts status codes to their wire numbers.
func codesToWire(codes []Code) []uint32 {
	if codes == nil {
		return nil
	}
	out := make([]uint32, len(codes))
	for i, c := range codes {
		out[i] = uint32(c)
	}
	return out
}

// codesFromWire converts wire numbers to status codes.
func codesFromWire(codes []uint32) []Code {
	if codes == nil {
		return nil
	}
	out := make([]Code, len(codes))
	for i, c := range codes {
		out[i] = Code(c)
	}
	return out
}

// asyncPolicy is the retry policy of an async request: the caller's when it
// sent one, else the method's, with DefaultAsyncRetryPolicy for the rest.
func asyncPolicy(env *wire.Request, method *MethodDesc) RetryPolicy {
	var p *RetryPolicy
	if env.Retry != nil {
		// The caller's: bounded (MaxAsyncAttempts, MaxRetryBackoff,
		// MaxRetryMultiplier), whatever it asked.
		p = &RetryPolicy{
			MaxAttempts:    min(env.Retry.MaxAttempts, MaxAsyncAttempts),
			InitialBackoff: boundedMillis(env.Retry.InitialBackoff, MaxRetryBackoff),
			MaxBackoff:     boundedMillis(env.Retry.MaxBackoff, MaxRetryBackoff),
			Multiplier:     min(env.Retry.Multiplier, MaxRetryMultiplier),
			RetryableCodes: codesFromWire(env.Retry.RetryableCodes),
		}
	} else if method != nil {
		p = method.Retry
	}
	return p.over(DefaultAsyncRetryPolicy)
}

// boundedMillis converts ms, a caller's count of milliseconds, to a
// duration of at most limit (0 for a negative count), without overflow.
func boundedMillis(ms int64, limit time.Duration) time.Duration {
	switch {
	case ms <= 0:
		return 0
	case ms >= limit.Milliseconds():
		return limit
	}
	return time.Duration(ms) * time.Millisecond
}

// retriesAsync reports whether an async request that failed with err on
// attempt gets another attempt under p.
func (p RetryPolicy) retriesAsync(err error, attempt int) bool {
	if attempt >= p.MaxAttempts || IsPermanent(err) {
		return false
	}
	code := CodeOf(err)
	if len(p.RetryableCodes) > 0 {
		for _, c := range p.RetryableCodes {
			if c == code {
				return true
			}
		}
		return false
	}
	return !permanentCodes[code]
}
