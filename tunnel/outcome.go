package tunnel

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// Writing a request's outcome: the response, the completion script that
// retires the request, and the scripts the server runs through its
// completion batcher.

// responseError returns the status resp carries, nil for OK.
func responseError(resp *wire.Response) error {
	if resp == nil || Code(resp.Code) == OK {
		return nil
	}
	return &Error{code: Code(resp.Code), message: resp.Message}
}

// errorResponse builds a response carrying err as a status.
func errorResponse(id string, err error) *wire.Response {
	e := toError(err)
	resp := &wire.Response{Version: wire.Version, ID: id, Code: uint32(e.code), Message: e.message}
	if e.code == OK { // an *Error with code OK is still a failure
		resp.Code = uint32(Unknown)
	}
	for _, d := range e.details {
		if b, err := proto.Marshal(d); err == nil {
			resp.Details = append(resp.Details, b)
		}
	}
	return resp
}

// complete writes a claimed request's outcome (see completeScript) and
// retires its entry in one script, batched with other completions. It
// returns once that is done, so a handler slot also covers its completion.
// If Redis cannot be reached it keeps trying, with backoff, for as long as
// the request's state lives (see settle).
func (r *serveRun) complete(q *queue, req *received, comp *completion, log *requestLogger) {
	comp.of(q, req)
	r.settle(comp, log, r.completer.complete(comp))
}

// completeLater is complete for a request whose handler has returned
// (see handle): it queues comp and returns at once. completionWritten
// ends the request and gives back its slot once comp is written.
func (r *serveRun) completeLater(q *queue, req *received, comp *completion) {
	comp.of(q, req) // and no written channel: nobody waits
	if err := r.completer.submit(context.Background(), comp); err != nil {
		// Not before Serve has waited for every handler; settled as a
		// failed write all the same.
		comp.result = completionResult{err: err}
		r.completionWritten(comp)
	}
}

// completionWritten is told of a completion queued by completeLater,
// on the completer's goroutine, once its script has run. An answer or
// an async success written as asked ends its request there and then;
// any other result is settled (see settle) on a goroutine of its own,
// as it may log, note a retry, refuse a foreign key or write again with
// backoff, none of which may hold up the completer.
func (r *serveRun) completionWritten(comp *completion) {
	if comp.result.err == nil && comp.result.n == store.Written && (comp.Action == store.ActionReply || comp.Action == store.ActionDone) {
		r.endLater(comp)
		return
	}
	go func() { // counted in r.handlers until endLater
		r.settle(comp, r.server.handlerLog(comp.req), comp.result)
		r.endLater(comp)
	}()
}

// of makes comp the completion of req, read from q.
func (comp *completion) of(q *queue, req *received) {
	comp.queue, comp.req = q, req
	comp.EntryID, comp.State = req.entryID, req.state
}

// endLater ends the request of comp, a completion queued by
// completeLater, and gives back its slot.
func (r *serveRun) endLater(comp *completion) {
	q, req := comp.queue, comp.req // comp is emptied with its request's outcome
	r.endHandling(req)
	r.releaseSlots(q, 1)
	r.handlers.Done()
}

// settle acts on res, the result of writing comp: it notes and logs
// what the script reported and, while Redis cannot be reached, writes
// comp again with backoff for as long as the request's state lives: the
// outcome exists, and the request stays this worker's (its lease is
// extended meanwhile) until it is written.
func (r *serveRun) settle(comp *completion, log *requestLogger, res completionResult) {
	q, req := comp.queue, comp.req
	giveUp := time.Now().Add(comp.TTL)
	backoff := newBackoff(50*time.Millisecond, time.Second)
	for {
		if res.err == nil && (res.n == store.Held || (res.n == store.Written && comp.Action == store.ActionRetry)) {
			q.notifyRetry()
		}
		switch {
		case res.err == nil && res.n == store.Written && comp.Action == store.ActionDead && comp.LetterHeld:
			log.Error("rpr: held async request dead-lettered, now that its dead-letter stream has room")
		case res.err == nil && res.n == store.Written && comp.Action == store.ActionDead:
			l := comp.Letter
			log.Error("rpr: async request dead-lettered", "reason", l.Reason, "attempt", l.Attempts, "code", l.Code, "error", l.Error)
		case res.err == nil && res.n == store.Held:
			r.noteHeld(q, log, "request held in the retry set, not run again")
		case res.err == nil && res.n == store.Fenced:
			r.server.stats.leasesLost.Add(1)
			log.Warn("rpr: lost this request to another worker (lease expired); outcome not written")
		case res.err == nil && res.n == store.CallerGone:
			log.Warn("rpr: caller's response stream is gone (caller exited?); response dropped", "reply_to", req.env.ReplyTo)
		case res.err == nil && res.n == store.ReplyWrongType:
			r.refuseForeign(q, req, comp.Target, true)
		case res.err == nil && res.n == store.StateWrongType:
			r.refuseForeign(q, req, comp.State, true)
		case res.err != nil && time.Now().Before(giveUp):
			log.Warn("rpr: write outcome failed; retrying", "error", res.err)
			backoff.wait(context.Background())
			res = r.completer.complete(comp)
			continue
		case res.err != nil:
			log.Error("rpr: write outcome failed until the request's state expired; giving up (the caller has timed out)", "error", res.err)
		}
		return
	}
}

// send writes a response to a caller who sent an entry that could not be
// decoded; there is no state to update.
func (r *serveRun) send(q *queue, entryID, replyTo string, resp *wire.Response) {
	raw, err := wire.EncodeResponse(resp)
	if err != nil {
		r.server.log.Error("rpr: encode response", "request_id", resp.ID, "error", err)
		return
	}
	r.logFailure("answer a bad request", entryID, r.runScript(&store.NewReply(replyTo, raw).Call))
}

// logFailure logs cmd's error, if any. An entry whose dead-lettering or
// answer failed stays pending and is offered again by the reclaim scan.
func (r *serveRun) logFailure(what, entryID string, err error) {
	if err != nil {
		r.server.log.Error("rpr: "+what, "entry", entryID, "error", err)
	}
}

// deadLetterEntry dead-letters the entry entryID of q as it is (raw),
// with letter; at the dead-letter stream's cap it stays pending, for the
// reclaim scan to offer again, and the hold is noted.
func (r *serveRun) deadLetterEntry(q *queue, entryID, raw string, letter wire.DeadLetter) {
	call := store.NewDeadLetterEntry(q.keys, q.requests, entryID, raw, letter, r.server.deadLetterCap())
	if err := r.runScript(&call.Call); err != nil {
		r.logFailure("dead-letter request entry", entryID, err)
		return
	}
	if written, err := call.Result(); err == nil && !written {
		r.noteHeld(q, r.server.log.With("entry", entryID, "reason", letter.Reason), "entry left pending, offered again after a lease")
	}
}

// runScript sends call through the completion batcher and returns its
// error once it has run.
func (r *serveRun) runScript(call *store.Call) error {
	call.Use(r.server.dialect)
	result := make(chan error, 1)
	if err := r.completions.submit(context.Background(), scriptOp(call, func(err error) { result <- err })); err != nil {
		return err
	}
	return <-result
}
