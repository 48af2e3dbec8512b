package tunnel

import (
	"context"
	"fmt"
	"time"

	"github.com/rprtunnel/rpr/internal/wire"
)

// A key of rpr's that holds another kind of value than rpr keeps there (a
// string where a request's state hash or a caller's response stream
// belongs) was written by something other than rpr. The scripts report it
// per request (store.VerdictForeign, store.ReplyWrongType,
// store.StateWrongType) so that the rest of their batch goes on; the
// request it belongs to is dead-lettered here, alone, with a reason that
// names the key and what to do.

// refuseForeign dead-letters req, whose key key (its state hash or its
// reply stream) holds a foreign value, and answers its caller when there
// is one to tell and its reply stream is not the foreign key. ran says
// whether its handler already ran (the key was found when its outcome was
// written) or it was not executed.
func (r *serveRun) refuseForeign(q *queue, req *received, key string, ran bool) {
	reason := r.foreignReason(q, key, ran, req.env.Kind == wire.KindAsync)
	log := r.server.requestLog(req.env)
	log.Error("rpr: a key of this request holds a value rpr did not write; request dead-lettered, the rest of its batch unaffected", "key", key, "executed", ran)
	if req.env.Kind != wire.KindAsync && key != req.env.ReplyTo && q.keys.IsResponses(req.env.ReplyTo) {
		err := Errorf(FailedPrecondition, "%s [%s]: %s", req.env.Method, req.env.ID, reason)
		r.send(q, req.entryID, req.env.ReplyTo, errorResponse(req.env.ID, err))
	}
	letter := wire.DeadLetter{Reason: reason, Code: FailedPrecondition.String(), Worker: r.server.opts.WorkerID, Lane: r.server.opts.Lane}
	r.deadLetterEntry(q, req.entryID, req.raw, letter)
}

// foreignReason says what is wrong with key, naming the kind of value it
// holds, and what the operator can do: for an async request not executed,
// also that replaying its dead letter runs it.
func (r *serveRun) foreignReason(q *queue, key string, ran, async bool) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kind, err := r.server.rdb.Type(ctx, key).Result()
	if err != nil || kind == "none" {
		kind = "value of another kind" // since deleted, or Redis did not say
	}
	fix := "delete that key (or give rpr a prefix of its own: ServerOptions.Prefix, ClientOptions.Prefix, --prefix)"
	if q.keys.IsResponses(key) {
		outcome := "not executed"
		if ran {
			outcome = "executed, answer not delivered"
		}
		return fmt.Sprintf("%s: its reply-to %s holds a %s, not a response stream: something other than rpr writes under rpr's prefix; %s", outcome, key, kind, fix)
	}
	if ran || !async {
		outcome := "not executed"
		if ran {
			outcome = "executed, outcome not recorded"
		}
		return fmt.Sprintf("%s: its state key %s holds a %s, not rpr's request state (a hash): something other than rpr writes under rpr's prefix; %s", outcome, key, kind, fix)
	}
	return fmt.Sprintf("not executed: its state key %s holds a %s, not rpr's request state (a hash): something other than rpr writes under rpr's prefix; %s, then replay this dead letter (rpr dlq replay)", key, kind, fix)
}
