package tunnel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/bufpool"
	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// Sending a unary request (its XADD, batched in the client's writer) and
// giving up on it when the caller's context ends first (the arbiter).

// sendOp is a unary request's XADD, waiting in the client's writer, and
// where the call's outcome arrives.
type sendOp struct {
	pipelineOp
	fieldXAdd
	svc  *clientService
	call *outgoingCall
	// outcome receives the call's one wake-up: its response, or the
	// failure of its send (clientService.complete delivers both).
	outcome callWaiter
	// mu guards what finished records for a caller that gave up and asks
	// (awaitEntryID): nearly every call never asks, so its channel is made
	// only then.
	mu      sync.Mutex
	entryID string        // the request's entry, once the XADD returned
	sent    bool          // the XADD has returned
	sentCh  chan struct{} // made by awaitEntryID, closed by finished
	// envelope is the request's, from pool: finished gives it back, or
	// the caller when it withdraws the op before it is taken.
	envelope *[]byte
	pool     *bufpool.Pool
}

// holdsCall reports whether op keeps its call from reuse while a flusher
// may read it: the first attempt's send, which is part of the call.
func (op *sendOp) holdsCall() bool { return op == &op.call.firstSend }

// letGo drops the op's hold on its call, if it has one; neither may be
// used after.
func (op *sendOp) letGo() {
	if op.holdsCall() {
		op.call.owner.letGo()
	}
}

// init makes op, a zero sendOp, the op that adds envelope to stream (a
// string, or a name boxed once: clientService.requestStream). Its
// caller learns of success only when it asks (awaitEntryID), and of
// failure through outcome: a call's one wake-up is its outcome.
func (op *sendOp) init(svc *clientService, call *outgoingCall, stream any, envelope *[]byte, pool *bufpool.Pool, signals *signalPool) {
	op.svc, op.call, op.envelope, op.pool = svc, call, envelope, pool
	op.outcome.done = signals.get() // back to signals once the call has received from it
	op.set(stream, wire.Field, *envelope)
	op.command = op
}

func (op *sendOp) finished(cmd redis.Cmder) {
	defer op.letGo()     // last: the call, and op in it, may be reused once it has run
	op.releaseEnvelope() // the XADD has returned: nothing reads it again
	op.mu.Lock()
	if xadd, ok := cmd.(*redis.StringCmd); ok {
		op.entryID = xadd.Val()
	}
	op.sent = true
	if op.sentCh != nil {
		close(op.sentCh)
	}
	op.mu.Unlock()
	if err := cmd.Err(); err != nil {
		if neverRan(err) { // Redis refused it, or was never reached
			op.svc.complete(op.call.id, callResult{err: notExecutedf(Unavailable,
				"%s [%s]: send request to redis: %v (it was not sent: safe to retry)", op.call.full, op.call.id, err)})
			return
		}
		// Whether the request reached Redis is unknown: only an idempotent
		// method's call is retried after this.
		op.svc.complete(op.call.id, callResult{err: &Error{code: Unavailable, local: true,
			message: fmt.Sprintf("%s [%s]: send request to redis: %v (whether it reached Redis, and so may run, is unknown)", op.call.full, op.call.id, err)}})
	}
}

// releaseEnvelope gives the request's envelope back to its pool. Only
// whoever settles the op (finished, or the caller whose abandon
// succeeded) calls it.
func (op *sendOp) releaseEnvelope() {
	op.dropValue()
	op.pool.Put(op.envelope)
	op.envelope = nil
}

// awaitEntryID waits up to budget for the send's reply and returns the
// request's entry id, "" when it is not known.
func (op *sendOp) awaitEntryID(budget time.Duration) string {
	op.mu.Lock()
	if op.sent {
		defer op.mu.Unlock()
		return op.entryID
	}
	if op.sentCh == nil {
		op.sentCh = make(chan struct{})
	}
	sent := op.sentCh
	op.mu.Unlock()
	select {
	case <-sent:
		op.mu.Lock()
		defer op.mu.Unlock()
		return op.entryID
	case <-time.After(budget):
		return ""
	}
}

// lostTermNote is why a "never ran" settled by another master term
// than the one that held the request proves nothing (see termLog).
const lostTermNote = "Redis failed over or restarted since the request was sent, and the master that took over may have lost the record of a worker taking it"

// arbiterBudget bounds the one round trip a call makes after its deadline
// or cancellation to settle whether the request ran, so that a stalled
// Redis delays the caller by at most this much.
const arbiterBudget = 500 * time.Millisecond

// gaveUp ends a call whose context ended: it marks the request TIMEOUT or
// CANCELLED unless a worker got to it first, which is what tells the caller
// whether it provably did not run (NotExecuted), if the master that
// settles it held it since it was sent at sentAt (sameTerm). A request
// that never left this process needs no mark.
func (c *Client) gaveUp(ctx context.Context, svc *clientService, call *outgoingCall, sentAt time.Time, maybeSent bool, entryID string) error {
	code, mark, what := DeadlineExceeded, wire.StateTimeout, "deadline exceeded"
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code, mark, what = Canceled, wire.StateCancelled, "call cancelled by the caller"
	}
	prefix := fmt.Sprintf("%s [%s]: %s", call.full, call.id, what)
	if !maybeSent {
		return notExecutedf(code, "%s before the request was sent; it was not executed", prefix)
	}
	actx, cancel := context.WithTimeout(context.Background(), arbiterBudget)
	defer cancel()
	service := call.method.Service.Name
	shard := c.keys.Shard(service, call.shard)
	arbiter := store.NewArbiter(shard, shard.Requests(call.lane), c.keys.Cancels(service), call.id, c.cancelMessage(service, call.id), entryID, mark, stateMargin)
	store.Run(actx, c.rdb, &arbiter.Call)
	settled, err := arbiter.Result()
	if err != nil {
		return Errorf(code, "%s; whether it was executed is unknown (could not reach Redis to settle it: %v)", prefix, err)
	}
	state := settled.Found
	switch {
	case settled.Marked() && !svc.sameTerm(call.shard, sentAt, settled):
		return Errorf(code, "%s; whether it was executed is unknown (%s; it will not run from now on)", prefix, lostTermNote)
	case settled.Marked():
		return notExecutedf(code, "%s while the request waited in the queue; it was not executed and will not be", prefix)
	case state == wire.StateProcessing || state == store.ArbiterDelivered:
		return Errorf(code, "%s while the request was executing on a server; it may have taken effect", prefix)
	case state == store.ArbiterFinished:
		return Errorf(code, "%s while the request was executing on a server; it may have taken effect (it ended just as the caller gave up, too late for its answer)", prefix)
	case state == store.ArbiterUnknown:
		return Errorf(code, "%s; whether it was executed is unknown (Redis's reply to the send was lost)", prefix)
	default: // SUCCESS or FAILED: finished just as the caller gave up
		return Errorf(code, "%s while the request was executing; it ran and ended %s just as the caller gave up", prefix, state)
	}
}
