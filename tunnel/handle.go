package tunnel

import (
	"context"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// Running one claimed request: its handler's context, the handler itself
// (a panic becomes INTERNAL), the response and the completion that
// retires the request.

// handling holds what handle makes for one request: its entry in the
// running set, inside the request's own allocation, and what its handler
// may keep after it returns, apart (see handlerScope).
type handling struct {
	running runningRequest
	scope   *handlerScope
	outcome *outcomeSpace
}

// handlerScope is what a handler can reach and may keep after it
// returns: its context (the deadline parent, the context carrying the
// handler's info) and what its decode function reads. It is allocated
// per request and left to the collector, so that the rest of the
// request (received), which no handler can reach, is reused once the
// request ends (serveRun.requests): the request was the biggest
// allocation a busy server made per call.
type handlerScope struct {
	deadline deadlineContext // the parent of the handler's context
	info     handlerInfo
	ctx      infoContext // the handler's context, carrying info
	// method and payload are the request's, for the handler's decode;
	// payload is emptied when its buffer goes back (see giveBack).
	method  string
	payload []byte
}

// outcomeSpace is what handle writes a request's outcome into: its
// response and its completion on the paths nearly every request takes (a
// unary answer, an async success), and what ending the request undoes
// once the completion is written (see endHandling). Nothing of it
// outlives the request's end (the completer is done with a completion
// once it has signalled it), so it is reused from serveRun.outcomes
// rather than allocated per request.
type outcomeSpace struct {
	response   wire.Response
	completion completion
	// resp is the response the request ends with: response, or one built
	// for an error.
	resp    *wire.Response
	cancel  context.CancelCauseFunc // the handler context's
	span    trace.Span
	measure callMeasure
	// raw is the encoded response, in Server.buffers until the script
	// that carries it has run.
	raw *[]byte
}

// handle runs (or, for an orphan, refuses) one claimed request and writes
// its final state and response. The request counts as running, with its
// lease extended, until its completion is written.
//
// A request's completion is written after handle returns: handle queues
// it and reports handedOff, and the completer ends the request
// and gives back its slot once the script that carries it has run (see
// completeLater). The handler's goroutine is free for the next request
// at once instead of waiting for the round trip: that wait and the
// wake-up after it were a goroutine switch per request. Otherwise the
// request is over when handle returns, and its slot is the caller's to
// give back (a stream, a held request, a response that cannot be
// encoded).
func (r *serveRun) handle(q *queue, req *received, d store.Decision) (handedOff bool) {
	s := r.server
	if req.env.Kind == wire.KindStream && d.Verdict == store.VerdictRun && req.method != nil && req.method.IsStreaming() && req.denied == nil {
		r.startStream(q, req)
		return false
	}
	if d.Verdict == store.VerdictHeld {
		r.completeHeld(q, req)
		return false
	}
	out := r.outcomes.get()
	req.handling.outcome = out
	scope := &handlerScope{method: req.env.Method, payload: req.env.Payload}
	req.handling.scope = scope
	log := s.handlerLog(req)
	deadline := s.clock.toLocal(req.deadline)
	started := time.Now()
	r.deadlines.startHidden(&scope.deadline, deadline, started)
	ctx, cancelCause := context.WithCancelCause(&scope.deadline)
	out.cancel = cancelCause
	ctx = withCaller(ctx, req.caller())
	req.handling.running = runningRequest{queue: q, received: req, cancel: cancelCause}
	r.running.add(req.env.ID, &req.handling.running)

	queueWait := time.Duration(s.clock.toRedis(started)-req.env.Enqueued) * time.Millisecond
	ctx, out.span = s.tracing.startServer(ctx, req.env, s.opts.WorkerID, queueWait)
	r.metrics.queueWait.Record(ctx, max(queueWait, 0).Seconds(), r.metrics.attrs.lookup(req.env.Method, OK, false).record...)
	out.measure = r.metrics.begin(ctx, req.env.Method)
	var handlerErr error
	var reply *[]byte // the response's payload, in Server.buffers
	if d.Verdict == store.VerdictOrphan {
		log.Error("rpr: outcome unknown: the worker running this request died; not executing it again (the method is not idempotent)", "previous_worker", d.Detail)
		handlerErr = Errorf(Aborted, "outcome unknown: worker %s died while executing %s (%s is not idempotent, so it was not run again)", d.Detail, req.env.ID, req.env.Method)
		out.resp = errorResponse(req.env.ID, handlerErr)
	} else {
		out.resp, reply, handlerErr = r.call(ctx, q, req, log)
	}
	if req.env.Kind == wire.KindAsync {
		comp := r.asyncOutcome(q, req, out.resp, handlerErr, d, log)
		recordOwnKey(q, req, &comp.Completion)
		if req.fast && comp.Action == store.ActionDone {
			comp.kind = doneFast // the done marker alone
		}
		comp.Fast = req.fast // a failure: no claim to fence with
		r.completeLater(q, req, comp)
		return true
	}
	final := wire.StateSuccess
	if Code(out.resp.Code) != OK {
		final = wire.StateFailed
	}
	raw, err := req.encodeResponsePooled(&s.buffers, out.resp)
	if reply != nil {
		s.buffers.Put(reply) // read only until the response is encoded
	}
	if err != nil {
		log.Error("rpr: encode response", "error", err)
		r.endHandling(req)
		return false
	}
	out.raw = raw
	comp := &out.completion
	*comp = completion{kind: completeClaimed,
		Completion: store.Completion{Action: store.ActionReply, Target: req.env.ReplyTo, Final: final, TTL: stateTTL(deadline, started), Response: *raw}}
	if req.fast {
		comp.kind = answerFast // no state to record
	}
	if s.opts.Retention > 0 {
		r.recordFinished(q, req, out.resp, started, &comp.Completion)
	}
	r.completeLater(q, req, comp)
	return true
}

// endHandling ends req once its outcome is written (or cannot be): its
// metrics and span end, it stops counting as running, its handler's
// context is cancelled and what it held, req included, goes back to its
// pools. The request's slot is its caller's to give back; req must not
// be used after.
func (r *serveRun) endHandling(req *received) {
	out := req.handling.outcome
	if out.raw != nil {
		r.server.buffers.Put(out.raw) // the script that carried it has run
	}
	err := responseError(out.resp)
	out.measure.end(err)
	endSpan(out.span, err)
	r.running.remove(req.env.ID)
	out.cancel(nil)
	r.deadlines.release(&req.handling.scope.deadline)
	r.outcomes.put(out)
	r.giveBack(req)
	r.requests.put(req) // last: the calls above read the request
}

// giveBack returns the buffers req's envelope was read into to
// Server.buffers, once its outcome is written: handle is their last
// reader (the handler's decode copies the payload, the outcome's scripts
// copy the envelope), and what a handler may keep (its context, its
// metadata) holds only copies. A stream, or a request held back, keeps
// its buffers for the collector. req's envelope and what its handler's
// decode reads are emptied, so that a late reader finds nothing rather
// than another request's bytes.
func (r *serveRun) giveBack(req *received) {
	if req.lent == nil {
		return
	}
	r.server.buffers.PutAll(req.lent)
	req.lent, req.raw, req.env.Payload = nil, "", nil
	req.handling.scope.payload = nil
}

// call runs the handler for req and builds the response envelope. It also
// returns the error behind a failure, which says more than the envelope
// (whether it is Permanent), and the buffer of the server's pool the
// response's payload is in (nil for none), for the caller to give back
// once the response is encoded.
func (r *serveRun) call(ctx context.Context, q *queue, req *received, log *requestLogger) (*wire.Response, *[]byte, error) {
	s, env := r.server, req.env
	fail := func(err error) (*wire.Response, *[]byte, error) { return errorResponse(env.ID, err), nil, err }
	if req.method == nil {
		log.Warn("rpr: unknown method")
		return fail(Errorf(Unimplemented, "%s [%s]: unknown method: service %s has no such method on this server (deployed an older version?)", env.Method, env.ID, q.name))
	}
	if req.method.IsStreaming() != (env.Kind == wire.KindStream) {
		log.Warn("rpr: call kind does not match the method", "streaming_method", req.method.IsStreaming())
		return fail(Errorf(FailedPrecondition, "%s [%s]: the server has this method as streaming=%t but the client sent it as streaming=%t: build both sides from the same .proto", env.Method, env.ID, req.method.IsStreaming(), env.Kind == wire.KindStream))
	}
	if req.method.Async != (env.Kind == wire.KindAsync) {
		log.Warn("rpr: call kind does not match the method", "async_method", req.method.Async)
		return fail(Errorf(FailedPrecondition, "%s [%s]: the server has this method as async=%t but the client sent it as async=%t: build both sides from the same .proto", env.Method, env.ID, req.method.Async, env.Kind == wire.KindAsync))
	}
	if req.denied != nil {
		log.Warn("rpr: caller not allowed to call the method; refused", "caller", req.caller())
		return fail(req.denied)
	}
	if len(env.Payload) > s.opts.MaxRequestBytes {
		log.Warn("rpr: request over the size limit", "bytes", len(env.Payload), "limit", s.opts.MaxRequestBytes)
		return fail(Errorf(ResourceExhausted, "%s [%s]: request is %d bytes, over the server's %d-byte limit (ServerOptions.MaxRequestBytes)", env.Method, env.ID, len(env.Payload), s.opts.MaxRequestBytes))
	}

	scope := req.handling.scope
	info := &scope.info
	*info = handlerInfo{header: req.handlerHeader(), id: env.ID, attempt: env.Attempt}
	if env.Kind == wire.KindAsync {
		info.idempotencyKey = env.Key
	}
	scope.ctx = infoContext{Context: ctx, info: info}
	ctx = &scope.ctx
	md := &info.response

	reply, err := r.runHandler(ctx, q, req.method, scope, log)
	resp := &req.handling.outcome.response
	*resp = wire.Response{Version: wire.Version, ID: env.ID, Header: md.header, Trailer: md.trailer}
	if err == nil && req.method.Async {
		return resp, nil, nil // nobody reads an async reply
	}
	var buf *[]byte
	if err == nil {
		buf, err = marshalPooled(&s.buffers, reply)
		switch {
		case err != nil:
			err = Errorf(Internal, "%s [%s]: marshal response: %v", env.Method, env.ID, err)
		case len(*buf) > s.opts.MaxResponseBytes:
			log.Error("rpr: response over the size limit", "bytes", len(*buf), "limit", s.opts.MaxResponseBytes)
			err = Errorf(ResourceExhausted, "%s [%s]: response is %d bytes, over the server's %d-byte limit (ServerOptions.MaxResponseBytes)", env.Method, env.ID, len(*buf), s.opts.MaxResponseBytes)
			s.buffers.Put(buf)
		default:
			resp.Payload = *buf
		}
	}
	if err != nil {
		errResp := errorResponse(env.ID, err)
		errResp.Header, errResp.Trailer = resp.Header, resp.Trailer
		return errResp, nil, err
	}
	return resp, buf, nil
}

// runHandler calls the user's handler, turning a panic into INTERNAL.
// The handler's decode function reads only scope, which the handler may
// keep, never the request, which is reused once it ends.
func (r *serveRun) runHandler(ctx context.Context, q *queue, method *MethodDesc, scope *handlerScope, log *requestLogger) (reply proto.Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("rpr: handler panicked", "panic", p, "stack", string(debug.Stack()))
			reply, err = nil, Errorf(Internal, "%s [%s]: handler panicked: %v", scope.method, scope.info.id, p)
		}
	}()
	base := r.server.log
	decode := func(m proto.Message) error {
		if err := proto.Unmarshal(scope.payload, m); err != nil {
			base.Warn("rpr: request payload does not decode", "request_id", scope.info.id, "method", scope.method, "error", err)
			return Errorf(InvalidArgument, "%s [%s]: request payload is not a valid %s: %v", scope.method, scope.info.id, m.ProtoReflect().Descriptor().FullName(), err)
		}
		return nil
	}
	reply, err = method.Handler(q.impl, ctx, decode, r.server.interceptor)
	if err == nil && !method.Async && (reply == nil || !reply.ProtoReflect().IsValid()) {
		err = Errorf(Internal, "%s [%s]: handler returned neither a reply nor an error", scope.method, scope.info.id)
	}
	return reply, err
}
