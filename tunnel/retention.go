package tunnel

import (
	"strings"
	"time"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// What a server keeps of finished requests so that `rpr trace` (and
// admin.Service.Trace) finds them afterwards: the record under the
// request id (store.Shard.Done, a wire.Finished) that a completion writes
// with its outcome, in the same script run.

// recordFinished gives comp, the completion of a unary call that ran
// from started and answered resp, its finished record, for a server that
// keeps finished calls (ServerOptions.Retention): the outcome, the worker
// and the times, never the payload.
func (r *serveRun) recordFinished(q *queue, req *received, resp *wire.Response, started time.Time, comp *store.Completion) {
	s := r.server
	rec := wire.Finished{
		Worker:    s.opts.WorkerID,
		Code:      resp.Code,
		Message:   wire.CutMessage(resp.Message),
		StartedMs: s.clock.toRedis(started),
		DoneMs:    s.clock.toRedis(time.Now()),
		Bytes:     len(resp.Payload),
	}
	_, rec.Method, _ = strings.Cut(req.env.Method, "/")
	comp.Record, comp.RecordKey, comp.RecordTTL = rec.Encode(), q.keys.Done(req.env.ID), s.opts.Retention
}

// recordOwnKey makes comp, the outcome of an attempt of an async request,
// findable by the request id when the request was sent with an idempotency
// key of its own, which names its state: the state records the id, and a
// record under the id names the state (the key, "caller/key" for a signed
// request: wire.Request.StateName), both for as long as the state.
// Requests with the default key (their id) need neither.
func recordOwnKey(q *queue, req *received, comp *store.Completion) {
	env := req.env
	if env.Key == "" || env.Key == env.ID {
		return
	}
	comp.ID = env.ID
	comp.Record, comp.RecordKey, comp.RecordTTL = wire.Finished{Key: env.StateName()}.Encode(), q.keys.Done(env.ID), comp.TTL
}
