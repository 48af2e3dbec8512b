package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// How a client stream hears from its server and how it ends: frames and
// the final response come from the client's response reader (onFrame,
// onEnd); the caller's context, the wait for a worker and the worker's
// liveness end it from the client's side (callerGaveUp, acceptTimedOut,
// workerGone).

// onFrame handles a frame the server wrote for this stream. It runs on the
// response reader's goroutine, so it never blocks.
func (cs *clientStream) onFrame(f *wire.Frame) {
	switch f.Type {
	case wire.FrameAccept:
		cs.mu.Lock()
		if cs.accepted || cs.ended {
			cs.mu.Unlock()
			return
		}
		cs.accepted, cs.worker = true, f.Worker
		cs.sender = newFrameSender(cs.ctx, cs.c.rdb, cs.c.writer, f.Inbox, func() {
			cs.fail(Errorf(Unavailable, "%s [%s]: the stream broke: worker %s's inbox is gone (the worker stopped) after this caller received %d messages; the request may have had effects",
				cs.full(), cs.id(), f.Worker, cs.recv.received()), false)
		})
		timer := cs.acceptTimer
		cs.mu.Unlock()
		if timer != nil {
			timer.Stop()
		}
		cs.send.grant(f.Window, f.WindowBytes)
		close(cs.acceptC)
	case wire.FrameHeader:
		cs.setHeader(f.Header)
	case wire.FrameMessage:
		cs.setHeader(nil) // a message without a header frame: the header is empty
		if err := cs.recv.push(f.Seq, f.Payload); err != nil {
			cs.fail(Errorf(DataLoss, "%s [%s]: the stream broke after this caller received %d messages: %v; the request may have had effects", cs.full(), cs.id(), cs.recv.received(), err), true)
		}
	case wire.FrameCredit:
		cs.send.credit(f.Consumed, f.ConsumedBytes)
	case wire.FrameBlocked:
		if cr := cs.recv.blocked(f.Size); cr != nil {
			_ = cs.queueFrame(&wire.Frame{Type: wire.FrameCredit, Consumed: cr.consumed, ConsumedBytes: cr.bytes})
		}
	default:
		cs.c.log.Warn("rpr: stream frame of a type a caller does not take; ignored", "request_id", cs.id(), "type", f.Type)
	}
}

// setHeader records the response header, once.
func (cs *clientStream) setHeader(md Metadata) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.headerSeen || cs.ended {
		return
	}
	cs.header, cs.headerSeen = md, true
	close(cs.headerC)
}

// onEnd handles the server's final response: the stream's status and
// trailer. Messages that came before it are still received first.
func (cs *clientStream) onEnd(resp *wire.Response) {
	cs.setHeader(resp.Header)
	var status error
	if Code(resp.Code) != OK {
		e := &Error{code: Code(resp.Code), message: resp.Message, notExecuted: resp.Refused}
		for _, raw := range resp.Details {
			a := new(anypb.Any)
			if proto.Unmarshal(raw, a) == nil {
				e.details = append(e.details, a)
			}
		}
		status = e
	}
	cs.finish(status, resp.Trailer, io.EOF)
}

// fail ends the stream from this side with err, which RecvMsg then
// returns. With tellServer, a server still running the stream is told to
// stop (its handler's context is cancelled).
func (cs *clientStream) fail(err error, tellServer bool) error {
	if cs.finish(err, nil, err) && tellServer {
		cs.c.wg.Go(cs.cancelServer)
	}
	return err
}

// finish records how the stream ended, once: status (nil for OK) is the
// stream's outcome and recvEnd what RecvMsg returns after the messages
// already received. It reports whether this call ended the stream.
func (cs *clientStream) finish(status error, trailer Metadata, recvEnd error) bool {
	cs.mu.Lock()
	if cs.ended {
		cs.mu.Unlock()
		return false
	}
	if status != nil {
		status = withCall(status, cs.full(), cs.id())
	}
	cs.ended, cs.status, cs.trailer = true, status, trailer
	if !cs.headerSeen {
		close(cs.headerC)
	}
	if !cs.accepted {
		close(cs.acceptC)
	}
	acceptTimer, stopWatch := cs.acceptTimer, cs.stopWatch
	cs.mu.Unlock()
	if status != nil {
		recvEnd = status
	}
	cs.recv.finish(recvEnd)
	cs.send.fail(io.EOF)
	close(cs.endedC)        // after the buffer knows its end: see RecvMsg
	if acceptTimer != nil { // nil when the stream ended before it was opened
		acceptTimer.Stop()
	}
	if stopWatch != nil {
		stopWatch()
	}
	cs.svc.removeStream(cs.id())
	cs.started.end(status)
	cs.pass.done(status)
	cs.cancel(errStreamEnded)
	return true
}

// errStreamEnded is the cause of a stream context cancelled because the
// stream ended.
var errStreamEnded = errors.New("rpr: the stream ended")

// callerGaveUp ends the stream when the caller's context ends: it settles
// whether the server ever took the stream and, if it did, tells it to stop.
func (cs *clientStream) callerGaveUp(caller context.Context) {
	cs.mu.Lock()
	ended, opened, accepted := cs.ended, cs.opened, cs.accepted
	cs.mu.Unlock()
	if ended {
		return
	}
	code, mark, what := DeadlineExceeded, wire.StateTimeout, "deadline exceeded"
	if !errors.Is(caller.Err(), context.DeadlineExceeded) {
		code, mark, what = Canceled, wire.StateCancelled, "stream cancelled by the caller"
	}
	prefix := fmt.Sprintf("%s [%s]: %s", cs.full(), cs.id(), what)
	if !opened {
		cs.finish(notExecutedf(code, "%s before the stream was opened; nothing was sent", prefix), nil, nil)
		return
	}
	if accepted {
		// The server runs it: stop its handler (its own deadline ends it
		// too when that is what passed).
		cs.c.wg.Go(cs.cancelServer)
		cs.finish(Errorf(code, "%s after the caller received %d messages; the request may have had effects", prefix, cs.recv.received()), nil, nil)
		return
	}
	cs.awaitOpenSent()
	settled, err := cs.arbitrate(mark)
	state := settled.Found
	switch {
	case err != nil:
		cs.finish(Errorf(code, "%s; whether the server took the stream is unknown (could not reach Redis to settle it: %v)", prefix, err), nil, nil)
	case settled.Marked() && !cs.sameTerm(settled):
		cs.finish(Errorf(code, "%s; whether the server took the stream is unknown (%s)", prefix, lostTermNote), nil, nil)
	case settled.Marked() || state == store.ArbiterDelivered:
		cs.finish(notExecutedf(code, "%s before a worker took the stream; it was not executed and will not be", prefix), nil, nil)
	case state == store.ArbiterUnknown:
		cs.finish(Errorf(code, "%s; whether the server took the stream is unknown (Redis's reply to its open was lost)", prefix), nil, nil)
	default:
		cs.finish(Errorf(code, "%s as a worker took the stream; the request may have had effects", prefix), nil, nil)
	}
}

// sameTerm reports whether the arbiter's "no worker took it" was
// settled by the master that held the open when it was sent.
func (cs *clientStream) sameTerm(settled store.Settled) bool {
	cs.mu.Lock()
	sentAt := cs.openedAt
	cs.mu.Unlock()
	return cs.svc.sameTerm(cs.shard, sentAt, settled)
}

// awaitOpenSent waits, at most arbiterBudget, for the open's send to
// finish, so that the arbiter knows its entry id.
func (cs *clientStream) awaitOpenSent() {
	cs.mu.Lock()
	sent := cs.openSent
	cs.mu.Unlock()
	if sent == nil {
		return
	}
	select {
	case <-sent:
	case <-time.After(arbiterBudget):
	}
}

// acceptTimedOut ends a stream no worker took within its deadline for
// that, unless a worker has it after all (its accept is on the way).
func (cs *clientStream) acceptTimedOut() {
	cs.mu.Lock()
	ended, opened, accepted := cs.ended, cs.opened, cs.accepted
	cs.mu.Unlock()
	if ended || accepted {
		return
	}
	prefix := fmt.Sprintf("%s [%s]: no worker took the stream within %v", cs.full(), cs.id(), cs.c.opts.DefaultTimeout)
	if !opened {
		cs.finish(notExecutedf(DeadlineExceeded, "%s: it was never sent", prefix), nil, nil)
		return
	}
	cs.awaitOpenSent()
	settled, err := cs.arbitrate(wire.StateTimeout)
	state := settled.Found
	switch {
	case err != nil:
		cs.finish(Errorf(DeadlineExceeded, "%s; whether one took it since is unknown (could not reach Redis to settle it: %v)", prefix, err), nil, nil)
	case state == store.ArbiterUnknown:
		cs.finish(Errorf(DeadlineExceeded, "%s; whether one took it is unknown (Redis's reply to its open was lost)", prefix), nil, nil)
	case settled.Marked() && !cs.sameTerm(settled):
		cs.finish(Errorf(DeadlineExceeded, "%s; whether one took it is unknown (%s)", prefix, lostTermNote), nil, nil)
	case settled.Marked() || state == store.ArbiterDelivered:
		cs.finish(notExecutedf(DeadlineExceeded, "%s; it was not executed and will not be (are the servers overloaded? rpr stats)", prefix), nil, nil)
	case state == wire.StateProcessing:
		// A worker has just taken it: its accept frame is on its way.
	default:
		cs.finish(Errorf(DeadlineExceeded, "%s; it ended as %s", prefix, state), nil, nil)
	}
}

// workerGone ends an accepted stream whose worker stopped beating.
func (cs *clientStream) workerGone() {
	cs.mu.Lock()
	worker := cs.worker
	cs.mu.Unlock()
	cs.fail(Errorf(Unavailable, "%s [%s]: the stream broke: worker %s stopped beating (it crashed, or cannot reach Redis) after this caller received %d messages; the request may have had effects",
		cs.full(), cs.id(), worker, cs.recv.received()), false)
}

// arbitrate runs the arbiter on the stream's open: it marks the open so
// that no worker takes it any more, unless one took it already.
func (cs *clientStream) arbitrate(mark string) (store.Settled, error) {
	c := cs.c
	cs.mu.Lock()
	entryID := cs.entryID
	cs.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), arbiterBudget)
	defer cancel()
	service := cs.method.Service.Name
	shard := c.keys.Shard(service, cs.shard)
	arbiter := store.NewArbiter(shard, shard.Requests(cs.lane), c.keys.Cancels(service), cs.id(), c.cancelMessage(service, cs.id()), entryID, mark, stateMargin)
	store.Run(ctx, c.rdb, &arbiter.Call)
	return arbiter.Result()
}

// cancelServer tells the servers to cancel this stream's handler. The
// arbiter is tried again for a while when Redis does not answer in its
// budget (marking and announcing a cancel twice is harmless): with 2,000
// streams cancelled at once on a loaded machine, one try left hundreds of
// handlers running until their deadline.
func (cs *clientStream) cancelServer() {
	retry := newBackoff(100*time.Millisecond, 2*time.Second)
	var err error
	for range cancelServerTries {
		if _, err = cs.arbitrate(wire.StateCancelled); err == nil {
			return
		}
		if retry.wait(cs.c.ctx); cs.c.ctx.Err() != nil {
			break // the client closed: its response streams expire, and servers see it gone
		}
	}
	cs.c.log.Warn("rpr: could not tell the server to stop a stream; its handler ends with its deadline or when it sees the caller gone", "request_id", cs.id(), "error", err)
}

// cancelServerTries bounds cancelServer's tries (about 15 s with its
// backoff).
const cancelServerTries = 10
