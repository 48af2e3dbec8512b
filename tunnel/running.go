package tunnel

import (
	"context"
	"errors"
	"time"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// runningRequest is a request a worker has claimed and not yet completed.
type runningRequest struct {
	queue *queue
	// received is the request: its entry, its state hash ("" on the fast
	// path) and its verified caller, who alone may cancel it.
	*received
	cancel context.CancelCauseFunc
}

// runningSet tracks a worker's claimed requests by request id, for lease
// extension and cancellation. A request is reused once it ends (see
// received), so what the set hands out of one is read under its lock:
// a request read after its lock was let go could be another by then.
type runningSet struct {
	m idMap[*runningRequest]
}

// add registers a request until remove.
func (rs *runningSet) add(id string, req *runningRequest) { rs.m.put(id, req) }

// remove unregisters request id.
func (rs *runningSet) remove(id string) { rs.m.remove(id) }

// has reports whether request id runs here.
func (rs *runningSet) has(id string) bool {
	_, ok := rs.m.get(id)
	return ok
}

// cancel cancels the handler of request id, if it runs here.
func (rs *runningSet) cancel(id string, cause error) bool {
	return rs.cancelIf(id, cause, nil)
}

// cancelIf cancels the handler of request id, if it runs here and allowed
// (nil: always) says its caller may.
func (rs *runningSet) cancelIf(id string, cause error, allowed func(caller string, key *wire.CallerKey) bool) (cancelled bool) {
	rs.m.with(id, func(req *runningRequest) {
		if allowed == nil || allowed(req.caller(), req.key) {
			req.cancel(cause)
			cancelled = true
		}
	})
	return cancelled
}

// lease is what extending a running request's lease needs of it.
type lease struct {
	id, entryID string
	state       string // "" on the fast path: no claim in a state hash
}

// leases returns the leases of the running requests, grouped by the
// queue they came from.
func (rs *runningSet) leases() map[*queue][]lease {
	out := map[*queue][]lease{}
	rs.m.each(func(id string, req *runningRequest) {
		l := lease{id: id, entryID: req.entryID, state: req.state}
		if req.fast {
			l.state = "" // no claim in it: the pending list says whose it is
		}
		out[req.queue] = append(out[req.queue], l)
	})
	return out
}

var (
	// errCallerCancelled is the cause of a handler context cancelled because
	// its caller cancelled the call.
	errCallerCancelled = errors.New("rpr: the caller cancelled the call")
	// errLeaseLost is the cause of a handler context cancelled because its
	// worker lost the request's lease to another worker (fencing): whatever
	// the handler returns is not written.
	errLeaseLost = errors.New("rpr: this worker lost the request's lease to another worker")
)

// watchCancellations cancels running handlers whose callers announce that
// they gave up (arbiterScript publishes the request id), and takes the
// requests other workers hand to this one (handOff), until stop is closed.
func (r *serveRun) watchCancellations(stop <-chan struct{}, services []*serverService) {
	var channels []string
	handoffChannels := map[string]bool{}
	cancelChannels := map[string]string{} // channel -> service
	for _, svc := range services {
		channels = append(channels, r.server.keys.Cancels(svc.name), r.server.keys.Handoffs(svc.name))
		handoffChannels[r.server.keys.Handoffs(svc.name)] = true
		cancelChannels[r.server.keys.Cancels(svc.name)] = svc.name
	}
	sub := r.server.rdb.Subscribe(context.Background(), channels...)
	defer sub.Close()
	msgs := sub.Channel()
	for {
		select {
		case <-stop:
			return
		case msg, ok := <-msgs:
			if !ok {
				return
			}
			if handoffChannels[msg.Channel] {
				r.onHandoff(msg.Payload)
				continue
			}
			id, caller, sig := wire.ParseCancel(msg.Payload)
			service := cancelChannels[msg.Channel]
			// A signed request is cancelled only by its own caller's
			// signed cancel; an unsigned one by any.
			allowed := func(reqCaller string, key *wire.CallerKey) bool {
				return key == nil || (caller == reqCaller && key.VerifyCancel(service, id, sig))
			}
			if r.running.cancelIf(id, errCallerCancelled, allowed) || r.streams.cancelIf(id, errCallerCancelled, allowed) {
				r.server.log.Info("rpr: caller cancelled; cancelling its handler", "request_id", id)
			}
		}
	}
}

// extendLeases renews, every third of a lease, the leases of every request
// this worker runs, until stop is closed (after the last handler ended).
// A request whose lease was lost has its handler cancelled.
func (r *serveRun) extendLeases(stop <-chan struct{}) {
	s := r.server
	t := time.NewTicker(s.opts.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.Lease/3)
		r.extendOnce(ctx)
		cancel()
	}
}

// extendOnce renews every running request's lease, one script call per
// queue, and cancels the handlers of requests this worker lost.
func (r *serveRun) extendOnce(ctx context.Context) {
	s := r.server
	for q, reqs := range r.running.leases() {
		call := store.NewExtend(q.requests, s.opts.WorkerID, s.opts.Lease)
		call.Use(s.dialect)
		idOfEntry := make(map[string]string, len(reqs))
		for _, l := range reqs {
			call.Add(l.entryID, l.state)
			idOfEntry[l.entryID] = l.id
		}
		store.Run(ctx, s.rdb, &call.Call)
		lost, err := call.Result()
		if err != nil {
			s.log.Warn("rpr: extend leases; if this goes on for a lease, other workers take the requests over", "stream", q.requests, "running", len(reqs), "error", err)
			continue
		}
		for _, entry := range lost {
			id := idOfEntry[entry]
			s.stats.leasesLost.Add(1)
			s.log.Warn("rpr: lost the lease of a running request; cancelling its handler, its result will not be written", "request_id", id)
			r.running.cancel(id, errLeaseLost)
		}
	}
}
