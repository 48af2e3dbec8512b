package tunnel

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/rprtunnel/rpr/internal/wire"
)

// A unary call from start to answer: its attempts, each one XADD and
// one wait for the answer, and the answer turned into the reply.

// unaryCall is a unary call's start and what its attempts share, in one
// value that Client.calls reuses: it was a third of the bytes a busy
// client and its server allocated per call, and the bytes a process
// allocates set how often it collects.
type unaryCall struct {
	start callStart
	call  outgoingCall
	// holders counts who may still read the call: its caller, and the
	// flusher of its first send from the moment the send is queued until
	// the send's finished returns (the answer may overtake it). The last
	// to let go gives the call back to pool when call.delivered: then no
	// one but that flusher could still read it (nothing waits to deliver
	// to it, no later attempt's send points at it). A call whose context
	// ended first is left to the collector, as is one that retried.
	holders atomic.Int32
	pool    *objectPool[unaryCall]
}

// letGo drops one holder's claim on u; the last gives it back to its
// pool when its answer was delivered. u must not be used after. (The
// caller writes call.delivered before it lets go, so whoever lets go
// last reads it as the caller left it.)
func (u *unaryCall) letGo() {
	if u.holders.Add(-1) == 0 && u.call.delivered {
		u.pool.put(u)
	}
}

func (c *Client) invoke(ctx context.Context, method *MethodDesc, req, reply proto.Message, opts ...CallOption) (err error) {
	u := c.calls.get()
	u.pool = &c.calls
	u.holders.Store(1) // the caller's
	started := &u.start
	ctx = c.startCallIn(ctx, started, method, opts)
	defer func() {
		err = withCall(err, started.full, started.rid)
		started.end(err)
		u.letGo()
	}()
	return c.runUnary(ctx, u, method, req, reply)
}

// runUnary runs the started call u: its deadline, its in-flight slot and
// its attempts. (Apart from invoke to keep the defers of each few enough
// for the compiler to inline.)
func (c *Client) runUnary(ctx context.Context, u *unaryCall, method *MethodDesc, req, reply proto.Message) error {
	started := &u.start
	cfg, full, rid := &started.cfg, started.full, started.rid

	if deadline := c.deadline(ctx, method, cfg.timeout, started.began); !ctxEndsBy(ctx, deadline) {
		// Apart from u: a context may be kept by whatever it was passed
		// to (a go-redis hook, say), so it is never reused.
		own := new(deadlineContext)
		c.deadlines.start(own, ctx, deadline, started.began)
		defer c.deadlines.release(own)
		ctx = own
	}
	if ctx.Err() != nil { // cancelled, or a budget spent upstream
		return notSent(ctx, full, rid, "before the call began")
	}
	if err := c.takeSlot(ctx, started); err != nil {
		return err
	}
	defer c.slots.release()

	buf, err := c.marshalRequestPooled(started, req)
	if err != nil {
		return err
	}
	defer c.buffers.Put(buf) // every attempt's envelope is a copy
	call := &u.call
	*call = outgoingCall{method: method, full: full, id: rid, payload: *buf, cfg: cfg, owner: u}
	return c.attempts(ctx, started, call, reply)
}

// attempts runs call's attempts until one succeeds or its retry policy
// (the method's, or the call's WithRetry) allows no more.
func (c *Client) attempts(ctx context.Context, started *callStart, call *outgoingCall, reply proto.Message) error {
	cfg, method := call.cfg, call.method
	policy := cfg.retry.withDefaults()
	for attempt := 1; ; attempt++ {
		if started.span.IsRecording() {
			started.span.SetAttributes(attrAttempt.Int(attempt))
		}
		err := c.attempt(ctx, call, attempt, reply)
		if err == nil || cfg.retry == nil || !policy.allows(err, method, attempt) {
			return err
		}
		pause := policy.backoff(attempt)
		if deadline, _ := ctx.Deadline(); time.Until(deadline) <= pause {
			return err // no time left for another attempt
		}
		c.log.Debug("rpr: retrying", "request_id", call.id, "method", call.full, "attempt", attempt+1, "after", pause, "error", err)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return err
		}
	}
}

// sentOrContextEnded returns err, unless err is a failure to prepare or
// send a request that came from ctx having ended: then it is the error of
// a call not sent, with ctx's code (a Redis command made with an ended
// context fails, and must not read as Redis being unreachable).
func sentOrContextEnded(ctx context.Context, err error, full, rid string) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	e, ok := err.(*Error)
	if !ok || !e.local || !e.notExecuted || e.code == contextCode(ctx) {
		return err
	}
	return notSent(ctx, full, rid, "while the call was being prepared")
}

// outgoingCall is what every attempt of one call shares: the same request
// id (one call, one id in every log line and trace).
type outgoingCall struct {
	method  *MethodDesc
	full    string
	id      string
	payload []byte
	cfg     *callConfig
	// lane and shard are chosen on the first attempt and kept, so that
	// every attempt finds the request's state in the same shard.
	lane   string
	shard  int
	routed bool
	// firstSend is the first attempt's send, allocated with the call.
	// Later attempts take new ones: an attempt that gave up may leave its
	// send with a flusher, which finishes it after the attempt returned.
	firstSend sendOp
	// owner is the unaryCall the call is part of.
	owner *unaryCall
	// delivered: the first attempt's outcome was delivered, and no later
	// attempt sent anything (see unaryCall.holders).
	delivered bool
}

// attempt sends the call once and waits for its outcome.
func (c *Client) attempt(ctx context.Context, call *outgoingCall, attempt int, reply proto.Message) (err error) {
	full, rid := call.full, call.id
	// Circuit breakers: fail at once while Redis or the
	// service is down; report this attempt's outcome when it ends.
	pass, err := c.breakers.allow(call.method.Service.Name, full, rid)
	if err != nil {
		return err
	}
	defer func() {
		err = sentOrContextEnded(ctx, err, full, rid)
		pass.done(err)
	}()
	svc, err := c.service(ctx, call.method.Service.Name, call.method.Service.Shards)
	if err != nil {
		return err
	}
	if !call.routed {
		call.lane, call.shard = c.route(svc, call.method, call.cfg, "")
		call.routed = true
	}
	responses, err := c.openResponses(ctx, svc, call.shard)
	if err != nil {
		return err
	}
	if err := svc.admit(full, rid, c.maxBacklog(call.method), c.opts.BacklogWatermark); err != nil {
		return err
	}
	live, err := c.anyLiveWorker(ctx, svc, call.lane)
	if err != nil {
		return notExecutedf(Unavailable, "%s [%s]: cannot reach Redis to look for servers of %s: %v", full, rid, call.method.Service.Name, err)
	}
	if !live {
		return noLiveServer(c.noLiveServerError(svc, full, rid, call.lane))
	}

	// Rate limits: one round trip when a rule applies, none otherwise.
	if err := c.limit(ctx, svc, full, rid, call.cfg.header); err != nil {
		return err
	}

	return c.sendAndAwait(ctx, svc, call, attempt, responses.key, reply)
}

// sendAndAwait sends the attempt's request onto svc's stream, answers to
// replyTo, and waits for its outcome. (Apart from attempt, so that both
// keep their defers few enough for the compiler to inline them: a defer
// record unwound on every return was 2% of a caller's CPU.)
func (c *Client) sendAndAwait(ctx context.Context, svc *clientService, call *outgoingCall, attempt int, replyTo string, reply proto.Message) error {
	full, rid := call.full, call.id
	deadline, _ := ctx.Deadline()
	sentAt := time.Now()
	envelope, err := c.encodeRequestPooled(&wire.Request{
		Version:  wire.Version,
		ID:       rid,
		Method:   full,
		Deadline: c.clock.toRedis(deadline),
		Header:   call.cfg.header,
		ReplyTo:  replyTo,
		Enqueued: c.clock.toRedis(sentAt),
		Attempt:  attempt,
		Kind:     wire.KindUnary,
		Payload:  call.payload,
	})
	if err != nil {
		return notExecutedf(Internal, "%s [%s]: %v", full, rid, err)
	}

	send := &call.firstSend
	if attempt > 1 {
		send = new(sendOp)
		call.delivered = false // send, which may outlive the call, points at it
	}
	send.init(svc, call, svc.requestStream(c.keys, call.shard, call.lane), envelope, &c.buffers, &c.signals)
	if send.holdsCall() {
		call.owner.holders.Add(1) // the flusher's, let go when finished returns
	}
	svc.expect(rid, &send.outcome)
	defer svc.forget(rid)
	err = c.writer.submit(ctx, &send.pipelineOp)
	if err != nil {
		send.releaseEnvelope() // never queued
		send.letGo()
	}
	if errors.Is(err, errBatcherClosed) {
		return notExecutedf(Canceled, "%s [%s]: client closed", full, rid)
	}
	if err != nil { // the context ended while waiting to queue: nothing was sent
		return c.gaveUp(ctx, svc, call, sentAt, false, "")
	}

	if c.awaitOutcome(ctx, &send.outcome) {
		call.delivered = attempt == 1
		res := send.outcome.res
		if res.err != nil {
			return res.err
		}
		err := c.finish(full, res.resp, reply, call.cfg)
		c.responses.put(res.resp)
		c.buffers.PutAll(res.lent) // finish read the payload and kept nothing of it
		return err
	}
	// The context ended first. A request still queued in this process is
	// withdrawn and never sent; one already handed to Redis needs the
	// arbiter, which needs its entry id: the send's reply is due any
	// moment.
	if send.abandon() {
		send.releaseEnvelope() // withdrawn before a flusher took it
		return c.gaveUp(ctx, svc, call, sentAt, false, "")
	}
	return c.gaveUp(ctx, svc, call, sentAt, true, send.awaitEntryID(arbiterBudget))
}

// awaitOutcome waits for w's one wake-up: the call's outcome (its
// response, or a failed send), or the end of ctx; it reports whether the
// outcome came first. When ctx is a deadlineContext, it is the call's own
// (runUnary's: a handler's is hidden behind its cancelCtx), which wakes w
// as it ends: the wait is on w's channel alone, cheaper than a select, and
// ctx's Done channel is never made. Either way the channel is signalled
// exactly once, so it goes back to Client.signals.
func (c *Client) awaitOutcome(ctx context.Context, w *callWaiter) bool {
	if own, ok := ctx.(*deadlineContext); ok && own.wakeOnEnd(w) {
		<-w.done
		own.wakeOnEnd(nil)
	} else {
		select {
		case <-w.done:
		case <-ctx.Done():
			w.wake() // unless an outcome came meanwhile: its signal is there then
			<-w.done
		}
	}
	c.signals.put(w.done)
	return w.delivered()
}

// finish turns a response envelope into reply or an error.
func (c *Client) finish(full string, resp *wire.Response, reply proto.Message, cfg *callConfig) error {
	if cfg.responseHeader != nil {
		*cfg.responseHeader = resp.Header
	}
	if cfg.trailer != nil {
		*cfg.trailer = resp.Trailer
	}
	if Code(resp.Code) != OK {
		e := &Error{code: Code(resp.Code), message: resp.Message}
		for _, raw := range resp.Details {
			a := new(anypb.Any)
			if err := proto.Unmarshal(raw, a); err != nil {
				c.log.Warn("rpr: dropping undecodable error detail", "request_id", resp.ID, "method", full, "error", err)
				continue
			}
			e.details = append(e.details, a)
		}
		return e
	}
	if len(resp.Payload) > c.opts.MaxResponseBytes {
		return Errorf(ResourceExhausted, "%s [%s]: response is %d bytes, over the %d-byte limit (ClientOptions.MaxResponseBytes)", full, resp.ID, len(resp.Payload), c.opts.MaxResponseBytes)
	}
	if err := proto.Unmarshal(resp.Payload, reply); err != nil {
		return Errorf(Internal, "%s [%s]: response is not a valid %s: %v (are client and server built from the same .proto?)", full, resp.ID, reply.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}
