package tunnel

import (
	"context"
	"errors"

	"io"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rprtunnel/rpr/internal/wire"
)

// NewStream starts a streaming call of method, which must be a streaming
// method (MethodDesc.ClientStreams or ServerStreams); generated clients
// call it. The call is sent with the first SendMsg of a client- or
// bidirectional stream, or with CloseSend (a server-streaming call, whose
// one request then travels with it), or with the first RecvMsg or Header.
//
// The stream's context is derived from ctx: its deadline, when it has one,
// ends the stream on both sides, and cancelling ctx cancels the server's
// handler. A stream without a deadline lives as long as both sides do;
// only the wait for a worker to take it is bounded (the method's timeout,
// else ClientOptions.DefaultTimeout): a caller that waits that long gets
// DEADLINE_EXCEEDED, NotExecuted when no worker took the stream. A stream
// is never retried: one that broke says how many messages had arrived and
// whether the request may have had effects.
func (c *Client) NewStream(ctx context.Context, method *MethodDesc, opts ...CallOption) (ClientStream, error) {
	if c.streamInterceptor != nil {
		return c.streamInterceptor(ctx, method, c.newStream, opts...)
	}
	return c.newStream(ctx, method, opts...)
}

// newStream is NewStream without the interceptors.
func (c *Client) newStream(ctx context.Context, method *MethodDesc, opts ...CallOption) (_ ClientStream, err error) {
	if method.Service == nil || !method.IsStreaming() {
		return nil, notExecutedf(Internal, "NewStream of %s, which is not a streaming method (use Invoke or Enqueue)", method.Name)
	}
	spanCtx, started := c.startCall(ctx, method, opts)
	full, rid := started.full, started.rid
	defer func() {
		if err != nil {
			err = withCall(err, full, rid)
			started.end(err)
		}
	}()
	if ctx.Err() != nil {
		return nil, notSent(ctx, full, rid, "before the stream was opened")
	}
	if c.identity != nil && c.identity.seal {
		return nil, notExecutedf(FailedPrecondition, "streaming calls cannot be sealed: their messages travel as frames, which are neither sealed nor signed; call %s from a client whose Credentials do not set Seal", full)
	}
	if err := checkMetadataSize(full, rid, started.cfg.header); err != nil {
		return nil, err
	}
	pass, err := c.breakers.allow(method.Service.Name, full, rid)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			pass.done(err)
		}
	}()
	svc, err := c.service(ctx, method.Service.Name, method.Service.Shards)
	if err != nil {
		return nil, err
	}
	lane, shard := c.route(svc, method, &started.cfg, "")
	if err := c.checkCanSend(ctx, svc, method, full, rid, lane, started.cfg.header); err != nil {
		return nil, err
	}
	responses, err := c.openResponses(ctx, svc, shard)
	if err != nil {
		return nil, err
	}
	streamCtx, cancel := context.WithCancelCause(spanCtx)
	cs := &clientStream{
		c: c, svc: svc, method: method, started: started, pass: pass,
		ctx: streamCtx, cancel: cancel,
		lane: lane, shard: shard, replyTo: responses.key,
		window:   c.opts.StreamWindow,
		recv:     newRecvBuffer(c.opts.StreamWindow),
		acceptC:  make(chan struct{}),
		headerC:  make(chan struct{}),
		endedC:   make(chan struct{}),
		deadline: c.deadline(ctx, method, started.cfg.timeout, started.began),
	}
	cs.send = newSendWindow(func(size int) {
		_ = cs.queueFrame(&wire.Frame{Type: wire.FrameBlocked, Size: int64(size)})
	})
	if d, ok := ctx.Deadline(); ok {
		cs.streamDeadline = d
	}
	svc.addStream(rid, cs)
	// No goroutine per stream: the caller's context and the wait for a
	// worker end the stream through callbacks. Both take cs.mu first, so
	// either waits here until both are set, even when ctx has already
	// ended.
	cs.mu.Lock()
	if !cs.ended { // it may have failed while opening: then nothing is left to watch
		cs.acceptTimer = time.AfterFunc(time.Until(cs.deadline), cs.acceptTimedOut)
		cs.stopWatch = context.AfterFunc(ctx, func() { cs.callerGaveUp(ctx) })
	}
	cs.mu.Unlock()
	return cs, nil
}

// checkCanSend checks what every call checks before it is sent: the
// service's backlog cap, a live worker in the lane, and the rate limits.
func (c *Client) checkCanSend(ctx context.Context, svc *clientService, method *MethodDesc, full, rid, lane string, header Metadata) error {
	if err := svc.admit(full, rid, c.maxBacklog(method), c.opts.BacklogWatermark); err != nil {
		return err
	}
	live, err := c.anyLiveWorker(ctx, svc, lane)
	if err != nil {
		return notExecutedf(Unavailable, "%s [%s]: cannot reach Redis to look for servers of %s: %v", full, rid, method.Service.Name, err)
	}
	if !live {
		return noLiveServer(c.noLiveServerError(svc, full, rid, lane))
	}
	return c.limit(ctx, svc, full, rid, header)
}

// clientStream is the caller's side of one streaming call.
type clientStream struct {
	c       *Client
	svc     *clientService
	method  *MethodDesc
	started *callStart
	pass    breakerPass
	ctx     context.Context // ends with the stream
	cancel  context.CancelCauseFunc
	lane    string
	shard   int
	replyTo string
	window  StreamWindow // what this side grants the server

	deadline       time.Time // for a worker to take the stream
	streamDeadline time.Time // of the stream; zero: none
	stopWatch      func() bool
	acceptTimer    *time.Timer

	send    *sendWindow // this side's messages
	recv    *recvBuffer
	acceptC chan struct{} // closed once accepted, or ended
	headerC chan struct{} // closed once the header is known, or ended
	endedC  chan struct{} // closed once the end is recorded

	mu         sync.Mutex
	opened     bool
	openSent   chan struct{} // closed once the open's send finished
	openedAt   time.Time     // when the open was made, before its send
	entryID    string        // the open's entry, once Redis took it
	first      []byte        // a server-streaming call's request, held for the open
	hasFirst   bool
	closedSend bool
	accepted   bool
	worker     string
	sender     *frameSender // to the worker's inbox, once accepted
	header     Metadata
	headerSeen bool
	trailer    Metadata
	ended      bool
	status     error // how it ended: nil for OK
	recvEnded  bool  // RecvMsg has returned the end: Trailer is visible
}

var _ ClientStream = (*clientStream)(nil)

func (cs *clientStream) Context() context.Context { return cs.ctx }

func (cs *clientStream) full() string { return cs.started.full }
func (cs *clientStream) id() string   { return cs.started.rid }

// SendMsg implements ClientStream.
func (cs *clientStream) SendMsg(m proto.Message) error {
	payload, err := cs.c.marshalRequest(cs.started, m)
	if err != nil {
		return err
	}
	cs.mu.Lock()
	switch {
	case cs.ended:
		cs.mu.Unlock()
		return io.EOF
	case cs.closedSend:
		cs.mu.Unlock()
		return Errorf(FailedPrecondition, "%s [%s]: SendMsg after CloseSend", cs.full(), cs.id())
	case !cs.opened && !cs.method.ClientStreams:
		// A server-streaming call: its one request travels with the open,
		// which CloseSend sends.
		if cs.hasFirst {
			cs.mu.Unlock()
			return Errorf(FailedPrecondition, "%s [%s]: a server-streaming call takes one request", cs.full(), cs.id())
		}
		cs.first, cs.hasFirst = payload, true
		cs.mu.Unlock()
		return nil
	case !cs.opened:
		cs.mu.Unlock()
		return cs.open(payload, true, false)
	}
	cs.mu.Unlock()
	seq, err := cs.send.reserve(cs.ctx, len(payload))
	if err != nil {
		return cs.sendFailed(err)
	}
	return cs.queueFrame(&wire.Frame{Type: wire.FrameMessage, Seq: seq, Payload: payload})
}

// CloseSend implements ClientStream.
func (cs *clientStream) CloseSend() error {
	cs.mu.Lock()
	if cs.closedSend || cs.ended {
		cs.mu.Unlock()
		return nil
	}
	cs.closedSend = true
	if !cs.opened {
		first, hasFirst := cs.first, cs.hasFirst
		cs.mu.Unlock()
		if err := cs.open(first, hasFirst, true); !errors.Is(err, io.EOF) {
			return err
		}
		return nil
	}
	cs.mu.Unlock()
	if err := cs.queueFrame(&wire.Frame{Type: wire.FrameClose, Seq: cs.send.sentCount()}); !errors.Is(err, io.EOF) {
		return err
	}
	return nil // the stream has ended: RecvMsg says how
}

// RecvMsg implements ClientStream.
func (cs *clientStream) RecvMsg(m proto.Message) error {
	if err := cs.ensureOpen(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	payload, cr, err := cs.recv.pop(cs.ctx)
	if err != nil && cs.ctx.Err() != nil {
		// The stream's context ended: its end is being recorded, and what
		// arrived before it still comes first.
		<-cs.endedC
		payload, cr, err = cs.recv.pop(context.Background())
	}
	if err != nil {
		return cs.recvFailed(err)
	}
	if cr != nil {
		_ = cs.queueFrame(&wire.Frame{Type: wire.FrameCredit, Consumed: cr.consumed, ConsumedBytes: cr.bytes})
	}
	cs.c.metrics.streamMessage(cs.ctx, cs.full(), "received")
	if len(payload) > cs.c.opts.MaxResponseBytes {
		return cs.fail(Errorf(ResourceExhausted, "%s [%s]: stream message is %d bytes, over the %d-byte limit (ClientOptions.MaxResponseBytes)", cs.full(), cs.id(), len(payload), cs.c.opts.MaxResponseBytes), true)
	}
	if err := proto.Unmarshal(payload, m); err != nil {
		return cs.fail(Errorf(Internal, "%s [%s]: stream message is not a valid %s: %v (are client and server built from the same .proto?)", cs.full(), cs.id(), m.ProtoReflect().Descriptor().FullName(), err), true)
	}
	if !cs.method.ServerStreams {
		// A client-streaming call has one reply: read on to the end, so
		// that its status and trailer are known when RecvMsg returns.
		_, _, err := cs.recv.pop(cs.ctx)
		if err != nil && cs.ctx.Err() != nil {
			<-cs.endedC
			_, _, err = cs.recv.pop(context.Background())
		}
		switch {
		case err == nil:
			return cs.fail(Errorf(Internal, "%s [%s]: the server sent more than one reply to a client-streaming call", cs.full(), cs.id()), true)
		case errors.Is(err, io.EOF), errors.Is(err, errEndOfStream):
			cs.markRecvEnded()
		default:
			return cs.recvFailed(err)
		}
	}
	return nil
}

// Header implements ClientStream.
func (cs *clientStream) Header() (Metadata, error) {
	if err := cs.ensureOpen(); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	<-cs.headerC
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if !cs.headerSeen && cs.status != nil {
		return nil, cs.status
	}
	return cs.header, nil
}

// Trailer implements ClientStream.
func (cs *clientStream) Trailer() Metadata {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if !cs.recvEnded {
		return nil
	}
	return cs.trailer
}

// markRecvEnded records that RecvMsg returned the stream's end, so the
// trailer is visible from now on whatever order the frames came in.
func (cs *clientStream) markRecvEnded() {
	cs.mu.Lock()
	cs.recvEnded = true
	cs.mu.Unlock()
}

// ensureOpen sends the open unless it went already (a stream whose
// caller receives before it sends).
func (cs *clientStream) ensureOpen() error {
	cs.mu.Lock()
	if cs.opened {
		cs.mu.Unlock()
		return nil
	}
	first, hasFirst := cs.first, cs.hasFirst
	cs.mu.Unlock()
	return cs.open(first, hasFirst, false)
}

// open writes the request that opens the stream: with its first message
// when it has one, and closed when the caller sends nothing more.
func (cs *clientStream) open(first []byte, hasFirst, closed bool) error {
	cs.mu.Lock()
	if cs.opened || cs.ended || cs.ctx.Err() != nil {
		ended := cs.ended || cs.ctx.Err() != nil
		cs.mu.Unlock()
		if ended {
			return io.EOF // nothing sent; RecvMsg says why
		}
		return nil
	}
	cs.opened = true
	cs.openedAt = time.Now()
	cs.openSent = make(chan struct{})
	cs.mu.Unlock()
	defer close(cs.openSent)
	c := cs.c
	env := &wire.Request{
		Version:     wire.StreamVersion,
		ID:          cs.id(),
		Method:      cs.full(),
		Deadline:    c.clock.toRedis(cs.deadline),
		Header:      cs.started.cfg.header,
		ReplyTo:     cs.replyTo,
		Enqueued:    c.clock.toRedis(cs.openedAt),
		Attempt:     1,
		Kind:        wire.KindStream,
		Window:      cs.window.Messages,
		WindowBytes: cs.window.Bytes,
		Closed:      closed,
	}
	if cs.method.ClientStreams {
		env.Streams |= wire.StreamsClient
	}
	if cs.method.ServerStreams {
		env.Streams |= wire.StreamsServer
	}
	if !cs.streamDeadline.IsZero() {
		env.StreamDeadline = c.clock.toRedis(cs.streamDeadline)
	}
	if hasFirst {
		env.Messages, env.Payload = 1, first
		cs.send.take(len(first))
	}
	raw, err := c.encodeRequest(env)
	if err != nil {
		return cs.fail(notExecutedf(Internal, "%s [%s]: %v", cs.full(), cs.id(), err), false)
	}
	done := make(chan error, 1)
	op := newXAddOp(cs.svc.requestStream(c.keys, cs.shard, cs.lane), wire.Field, raw, func(entryID string, err error) {
		cs.mu.Lock()
		cs.entryID = entryID
		cs.mu.Unlock()
		done <- err
	})
	if err := c.writer.submit(cs.ctx, &op.pipelineOp); err != nil {
		return cs.fail(notExecutedf(Canceled, "%s [%s]: the stream was not opened: %v", cs.full(), cs.id(), err), false)
	}
	if err := <-done; err != nil {
		if neverRan(err) {
			return cs.fail(notExecutedf(Unavailable, "%s [%s]: send the stream's open to Redis: %v (it was not sent: safe to retry)", cs.full(), cs.id(), err), false)
		}
		return cs.fail(Errorf(Unavailable, "%s [%s]: send the stream's open to Redis: %v (whether it reached Redis, and so may run, is unknown)", cs.full(), cs.id(), err), false)
	}
	return nil
}

// queueFrame writes a frame to the worker's inbox once the worker has
// accepted the stream, waiting for that.
func (cs *clientStream) queueFrame(f *wire.Frame) error {
	if cs.ctx.Err() != nil {
		return io.EOF // the caller gave up or the stream ended: send nothing more
	}
	select {
	case <-cs.acceptC:
	case <-cs.ctx.Done():
		return cs.sendFailed(cs.ctx.Err())
	}
	cs.mu.Lock()
	sender, ended := cs.sender, cs.ended
	cs.mu.Unlock()
	if ended || sender == nil {
		return io.EOF
	}
	f.Version, f.ID = wire.StreamVersion, cs.id()
	raw, err := wire.EncodeFrame(f)
	if err != nil {
		return cs.fail(Errorf(Internal, "%s [%s]: %v", cs.full(), cs.id(), err), true)
	}
	if err := sender.send(raw); err != nil {
		return cs.sendFailed(err)
	}
	if f.Type == wire.FrameMessage {
		cs.c.metrics.streamMessage(cs.ctx, cs.full(), "sent")
	}
	return nil
}

// sendFailed is what SendMsg returns once sending failed: io.EOF when the
// stream ended (RecvMsg says how), else the reason.
func (cs *clientStream) sendFailed(err error) error {
	cs.mu.Lock()
	ended := cs.ended
	cs.mu.Unlock()
	if ended || errors.Is(err, io.EOF) {
		return io.EOF
	}
	if cs.ctx.Err() != nil {
		<-cs.endedC // the end is being recorded (callerGaveUp)
		return io.EOF
	}
	return cs.fail(Errorf(Unavailable, "%s [%s]: %v", cs.full(), cs.id(), err), true)
}

// recvFailed turns the end of the receiving side into RecvMsg's error:
// io.EOF for a clean end, else the stream's status.
func (cs *clientStream) recvFailed(err error) error {
	cs.markRecvEnded()
	if errors.Is(err, errEndOfStream) {
		return io.EOF
	}
	return err
}
