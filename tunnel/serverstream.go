package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// streamStateTTL is how long the state of a stream without a deadline is
// kept: `rpr trace` finds such a stream for that long after it started.
const streamStateTTL = 24 * time.Hour

// Causes of a stream handler's context ending, besides its deadline.
var (
	errCallerGone     = errors.New("rpr: the caller is gone (its response stream was not renewed)")
	errServerStopping = errors.New("rpr: the server is shutting down")
)

// serverStream is a handler's side of one streaming call.
type serverStream struct {
	run    *serveRun
	q      *queue
	req    *received
	ctx    context.Context
	cancel context.CancelCauseFunc
	send   *sendWindow
	recv   *recvBuffer
	sender *frameSender // to the caller's response stream

	mu         sync.Mutex
	header     Metadata
	headerSent bool
	trailer    Metadata
}

var _ ServerStream = (*serverStream)(nil)

func (ss *serverStream) Context() context.Context { return ss.ctx }

// SetHeader implements ServerStream.
func (ss *serverStream) SetHeader(md Metadata) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.headerSent {
		return errors.New("rpr: SetHeader after the header was sent (SendHeader or the first SendMsg sends it)")
	}
	if ss.header == nil {
		ss.header = Metadata{}
	}
	ss.header.merge(md)
	return nil
}

// SendHeader implements ServerStream.
func (ss *serverStream) SendHeader(md Metadata) error {
	if err := ss.SetHeader(md); err != nil {
		return err
	}
	return ss.flushHeader(true)
}

// flushHeader sends the header frame unless it went already; without
// always, only when the header has something in it (an empty one costs
// nothing: the caller sees it with the first message).
func (ss *serverStream) flushHeader(always bool) error {
	ss.mu.Lock()
	if ss.headerSent {
		ss.mu.Unlock()
		return nil
	}
	ss.headerSent = true
	header := ss.header
	ss.mu.Unlock()
	if !always && len(header) == 0 {
		return nil
	}
	return ss.queueFrame(&wire.Frame{Type: wire.FrameHeader, Header: header})
}

// SetTrailer implements ServerStream.
func (ss *serverStream) SetTrailer(md Metadata) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.trailer == nil {
		ss.trailer = Metadata{}
	}
	ss.trailer.merge(md)
}

// SendMsg implements ServerStream.
func (ss *serverStream) SendMsg(m proto.Message) error {
	env, s := ss.req.env, ss.run.server
	payload, err := proto.Marshal(m)
	if err != nil {
		return Errorf(Internal, "%s [%s]: marshal stream message: %v", env.Method, env.ID, err)
	}
	if len(payload) > s.opts.MaxResponseBytes {
		return Errorf(ResourceExhausted, "%s [%s]: stream message is %d bytes, over the server's %d-byte limit (ServerOptions.MaxResponseBytes)", env.Method, env.ID, len(payload), s.opts.MaxResponseBytes)
	}
	if err := ss.flushHeader(false); err != nil {
		return err
	}
	seq, err := ss.send.reserve(ss.ctx, len(payload))
	if err != nil {
		return ss.ctxError(err)
	}
	if err := ss.queueFrame(&wire.Frame{Type: wire.FrameMessage, Seq: seq, Payload: payload}); err != nil {
		return err
	}
	ss.run.metrics.streamMessage(ss.ctx, env.Method, "sent")
	return nil
}

// RecvMsg implements ServerStream.
func (ss *serverStream) RecvMsg(m proto.Message) error {
	env, s := ss.req.env, ss.run.server
	payload, cr, err := ss.recv.pop(ss.ctx)
	switch {
	case errors.Is(err, errEndOfStream):
		return io.EOF
	case err != nil:
		return ss.ctxError(err)
	}
	if cr != nil {
		_ = ss.queueFrame(&wire.Frame{Type: wire.FrameCredit, Consumed: cr.consumed, ConsumedBytes: cr.bytes})
	}
	ss.run.metrics.streamMessage(ss.ctx, env.Method, "received")
	if len(payload) > s.opts.MaxRequestBytes {
		return Errorf(ResourceExhausted, "%s [%s]: stream message is %d bytes, over the server's %d-byte limit (ServerOptions.MaxRequestBytes)", env.Method, env.ID, len(payload), s.opts.MaxRequestBytes)
	}
	if err := proto.Unmarshal(payload, m); err != nil {
		return Errorf(InvalidArgument, "%s [%s]: stream message is not a valid %s: %v", env.Method, env.ID, m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// ctxError explains a send or receive cut short by the handler's context.
func (ss *serverStream) ctxError(err error) error {
	if ss.ctx.Err() == nil {
		return err
	}
	cause := context.Cause(ss.ctx)
	code := Canceled
	if errors.Is(cause, context.DeadlineExceeded) {
		code = DeadlineExceeded
	}
	return NewError(code, cause)
}

// queueFrame writes a frame to the caller's response stream, after those
// queued before it.
func (ss *serverStream) queueFrame(f *wire.Frame) error {
	f.Version, f.ID = wire.StreamVersion, ss.req.env.ID
	raw, err := wire.EncodeFrame(f)
	if err != nil {
		return Errorf(Internal, "%s [%s]: %v", ss.req.env.Method, f.ID, err)
	}
	return ss.sender.send(raw)
}

// onFrame handles a frame the caller wrote to this worker's inbox for this
// stream; it runs on the inbox reader's goroutine, so it never blocks.
func (ss *serverStream) onFrame(f *wire.Frame) {
	switch f.Type {
	case wire.FrameMessage:
		if err := ss.recv.push(f.Seq, f.Payload); err != nil {
			ss.cancel(fmt.Errorf("rpr: the caller's side of the stream broke: %w", err))
		}
	case wire.FrameClose:
		ss.recv.closeAfter(f.Seq)
	case wire.FrameCredit:
		ss.send.credit(f.Consumed, f.ConsumedBytes)
	case wire.FrameBlocked:
		if cr := ss.recv.blocked(f.Size); cr != nil {
			_ = ss.queueFrame(&wire.Frame{Type: wire.FrameCredit, Consumed: cr.consumed, ConsumedBytes: cr.bytes})
		}
	default:
		ss.run.server.log.Warn("rpr: stream frame of a type a server does not take; ignored", "request_id", f.ID, "type", f.Type)
	}
}

// refusedResponse ends a stream that no handler ran: its caller may open
// it again (NotExecuted).
func refusedResponse(id string, err error) *wire.Response {
	resp := errorResponse(id, err)
	resp.Version, resp.Refused = wire.StreamVersion, true
	return resp
}

// startStream runs a streaming call this worker claimed: it accepts it
// (the caller learns where to send its messages), then runs the handler on
// a goroutine of its own, outside the handler slots: a stream may live for
// long, and ServerOptions.MaxStreams bounds how many do at once.
func (r *serveRun) startStream(q *queue, req *received) {
	s, env := r.server, req.env
	log := s.requestLog(env)
	if !req.method.ClientStreams && (env.Messages != 1 || !env.Closed) {
		r.endStream(q, req, refusedResponse(env.ID, Errorf(InvalidArgument, "%s [%s]: the method is server-streaming: its open must carry its one request and close the caller's side (send one message, then CloseSend)", env.Method, env.ID)), nil, log)
		return
	}
	if !r.streams.add(env.ID, nil, s.opts.MaxStreams) {
		log.Warn("rpr: refusing a stream: this server has ServerOptions.MaxStreams open", "max_streams", s.opts.MaxStreams)
		r.endStream(q, req, refusedResponse(env.ID, Errorf(ResourceExhausted, "%s [%s]: the server runs %d streams already (ServerOptions.MaxStreams); retry later or add servers", env.Method, env.ID, s.opts.MaxStreams)), nil, log)
		return
	}
	base := context.Background()
	var cancelDeadline context.CancelFunc = func() {}
	if env.StreamDeadline > 0 {
		base, cancelDeadline = context.WithDeadline(base, s.clock.toLocal(env.StreamDeadline))
	}
	ctx, cancel := context.WithCancelCause(base)
	window := s.opts.StreamWindow
	ss := &serverStream{run: r, q: q, req: req, cancel: cancel, recv: newRecvBuffer(window)}
	ss.sender = newFrameSender(ctx, s.rdb, r.frames, env.ReplyTo, func() { cancel(errCallerGone) })
	ss.send = newSendWindow(func(size int) {
		_ = ss.queueFrame(&wire.Frame{Type: wire.FrameBlocked, Size: int64(size)})
	})
	ss.send.grant(env.Window, env.WindowBytes)
	if env.Messages == 1 {
		_ = ss.recv.push(1, env.Payload)
	}
	if env.Closed {
		ss.recv.closeAfter(int64(env.Messages))
	}
	info := &handlerInfo{header: req.handlerHeader(), id: env.ID, attempt: env.Attempt}
	ss.ctx = withHandlerInfo(withCaller(ctx, req.caller()), info)
	r.streams.set(env.ID, ss)

	accept, err := wire.EncodeFrame(&wire.Frame{Version: wire.StreamVersion, ID: env.ID, Type: wire.FrameAccept,
		Inbox: q.keys.Inbox(s.opts.WorkerID), Worker: s.opts.WorkerID, Window: window.Messages, WindowBytes: window.Bytes})
	if err == nil {
		ttl := streamStateTTL + stateMargin
		if env.StreamDeadline > 0 {
			ttl = stateTTL(s.clock.toLocal(env.StreamDeadline), time.Now())
		}
		call := store.NewAcceptStream(q.requests, req.entryID, req.state, env.ReplyTo, ttl, accept)
		err = r.runScript(&call.Call)
		if n, _ := call.Result(); err == nil && n == store.CallerGone {
			err = errCallerGone
		}
	}
	if err != nil {
		// The entry stays pending: once its lease lapses another worker
		// answers the caller "outcome unknown", as for a crashed worker.
		log.Warn("rpr: could not accept a stream; its caller will be told", "error", err)
		r.streams.remove(env.ID)
		cancel(err)
		cancelDeadline()
		return
	}
	r.streamHandlers.Go(func() {
		defer cancelDeadline()
		r.serveStream(ss, log)
	})
}

// serveStream runs a stream's handler and ends the stream with its
// outcome, after the handler's last messages.
func (r *serveRun) serveStream(ss *serverStream, log *requestLogger) {
	s, req, env := r.server, ss.req, ss.req.env
	defer r.streams.remove(env.ID)
	queueWait := time.Duration(s.clock.toRedis(time.Now())-env.Enqueued) * time.Millisecond
	ctx, span := s.tracing.startServer(ss.ctx, env, s.opts.WorkerID, queueWait)
	ss.ctx = ctx
	r.metrics.queueWait.Record(ctx, max(queueWait, 0).Seconds(), r.metrics.attrs.lookup(env.Method, OK, false).record...)
	measure := r.metrics.begin(ctx, env.Method)

	err := r.runStreamHandler(ss, log)
	if err == nil && ss.ctx.Err() != nil {
		err = ss.ctxError(ss.ctx.Err())
	}
	if errors.Is(context.Cause(ss.ctx), errServerStopping) {
		err = Errorf(Unavailable, "%s [%s]: the server is shutting down; open the stream again", env.Method, env.ID)
	}
	// The stream's messages first, then its end.
	drainCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if derr := ss.sender.drain(drainCtx); derr != nil && !errors.Is(context.Cause(ss.ctx), errCallerGone) {
		log.Warn("rpr: stream messages not all written before its end", "error", derr)
	}
	cancel()
	resp := &wire.Response{Version: wire.Version, ID: env.ID}
	if err != nil {
		resp = errorResponse(env.ID, err)
	}
	ss.mu.Lock()
	if !ss.headerSent {
		resp.Header = ss.header
	}
	resp.Trailer = ss.trailer
	ss.mu.Unlock()
	measure.end(responseError(resp))
	endSpan(span, responseError(resp))
	ss.cancel(errStreamEnded)
	if errors.Is(context.Cause(ss.ctx), errCallerGone) {
		log.Info("rpr: stream ended: the caller is gone", "code", Code(resp.Code))
	}
	r.endStream(ss.q, req, resp, ss, log)
}

// runStreamHandler calls the user's stream handler, turning a panic into
// INTERNAL.
func (r *serveRun) runStreamHandler(ss *serverStream, log *requestLogger) (err error) {
	env, method := ss.req.env, ss.req.method
	defer func() {
		if p := recover(); p != nil {
			log.Error("rpr: stream handler panicked", "panic", p, "stack", string(debug.Stack()))
			err = Errorf(Internal, "%s [%s]: handler panicked: %v", env.Method, env.ID, p)
		}
	}()
	if interceptor := r.server.streamInterceptor; interceptor != nil {
		info := &StreamServerInfo{Server: ss.q.impl, FullMethod: env.Method, IsClientStream: method.ClientStreams, IsServerStream: method.ServerStreams}
		return interceptor(ss.q.impl, ss, info, method.StreamHandler)
	}
	return method.StreamHandler(ss.q.impl, ss)
}

// endStream writes a stream's final state and its response (status,
// trailer) to the caller, retrying while Redis cannot be reached, for as
// long as the caller can still be waiting.
func (r *serveRun) endStream(q *queue, req *received, resp *wire.Response, ss *serverStream, log *requestLogger) {
	raw, err := req.encodeResponse(resp)
	if err != nil {
		log.Error("rpr: encode stream response", "error", err)
		return
	}
	final := wire.StateSuccess
	if Code(resp.Code) != OK {
		final = wire.StateFailed
	}
	giveUp := time.Now().Add(time.Minute)
	backoff := newBackoff(50*time.Millisecond, time.Second)
	for {
		var sent, received int64
		if ss != nil {
			sent, received = ss.send.sentCount(), ss.recv.received()
		}
		call := store.NewEndStream(req.state, req.env.ReplyTo, final, stateMargin, raw, sent, received)
		err := r.runScript(&call.Call)
		if err == nil {
			return
		}
		if time.Now().After(giveUp) {
			log.Error("rpr: could not write a stream's end; giving up", "error", err)
			return
		}
		log.Warn("rpr: write a stream's end failed; retrying", "error", err)
		backoff.wait(context.Background())
	}
}

// openStreams is the streams a worker runs, by request id.
type openStreams struct {
	mu sync.Mutex
	m  map[string]*serverStream
}

// add reserves id's place unless max streams are open already.
func (o *openStreams) add(id string, ss *serverStream, max int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.m) >= max {
		return false
	}
	if o.m == nil {
		o.m = map[string]*serverStream{}
	}
	o.m[id] = ss
	return true
}

// set fills in id's stream.
func (o *openStreams) set(id string, ss *serverStream) {
	o.mu.Lock()
	o.m[id] = ss
	o.mu.Unlock()
}

func (o *openStreams) remove(id string) {
	o.mu.Lock()
	delete(o.m, id)
	o.mu.Unlock()
}

// get returns stream id, nil when it is not open here.
func (o *openStreams) get(id string) *serverStream {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[id]
}

// list returns the open streams.
func (o *openStreams) list() []*serverStream {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]*serverStream, 0, len(o.m))
	for _, ss := range o.m {
		if ss != nil {
			out = append(out, ss)
		}
	}
	return out
}

// cancelIf cancels stream id's handler with cause if allowed (nil:
// always) says its caller may; false when it is not open here or not
// cancelled.
func (o *openStreams) cancelIf(id string, cause error, allowed func(caller string, key *wire.CallerKey) bool) bool {
	ss := o.get(id)
	if ss == nil || (allowed != nil && !allowed(ss.req.caller(), ss.req.key)) {
		return false
	}
	ss.cancel(cause)
	return true
}
