package tunnel

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
)

// enqueuing is one async request waiting to be written.
type enqueuing struct {
	stream, retries string // the service's request stream and retry set
	capacity        int64
	due             int64 // Redis unix ms; 0 for at once
	raw             []byte
	// state moves from opQueued to opTaken when a flusher takes the
	// request, or to opAbandoned when its caller gives up first.
	state atomic.Int32
	// result is the verdict, set before written is signalled: once, by
	// the flusher that took the request, as its last use of it (the
	// caller then reuses both).
	result  enqueueResult
	written chan struct{}
}

// enqueueResult is the enqueue script's verdict on one request.
type enqueueResult struct {
	queued  bool
	backlog int64
	err     error
}

// enqueuer writes async requests in batches: whatever is queued when a
// flusher is free goes out as one store.Enqueue call per queue, all in
// one pipeline, so the cap check (two commands) is paid once per batch
// rather than once per request. A lone request leaves at once.
type enqueuer struct {
	*coalescer[*enqueuing]
	rdb redis.UniversalClient
}

func newEnqueuer(client redis.UniversalClient, flushers, maxBatch, queueSize int, observe func(size int, full bool)) *enqueuer {
	e := &enqueuer{rdb: client}
	e.coalescer = newCoalescer(flushers, maxBatch, queueSize, e.flush, observe)
	return e
}

// flush writes batch, one script call per queue.
func (e *enqueuer) flush(batch []*enqueuing) {
	// Requests must be written whatever happens to their callers once
	// taken (the caller then waits for the verdict), so the pipeline runs
	// on its own context.
	ctx := context.Background()
	type group struct {
		items []*enqueuing
		call  *store.Enqueue
	}
	var groups []*group
	byStream := map[string]*group{}
	for _, item := range batch {
		if !item.state.CompareAndSwap(opQueued, opTaken) {
			continue // abandoned: never sent
		}
		g := byStream[item.stream]
		if g == nil {
			g = &group{call: store.NewEnqueue(item.stream, item.retries, len(batch)), items: make([]*enqueuing, 0, len(batch))}
			byStream[item.stream] = g
			groups = append(groups, g)
		}
		g.items = append(g.items, item)
		g.call.Add(item.capacity, item.due, item.raw)
	}
	if len(groups) == 0 {
		return
	}
	calls := make([]*store.Call, len(groups))
	for i, g := range groups {
		calls[i] = &g.call.Call
	}
	store.Run(ctx, e.rdb, calls...)
	for _, g := range groups {
		verdicts, err := g.call.Result()
		for i, item := range g.items {
			if err != nil {
				item.result = enqueueResult{err: err}
			} else {
				item.result = enqueueResult{queued: verdicts[i].Queued, backlog: verdicts[i].Backlog}
			}
			item.written <- struct{}{} // last: the caller may reuse item once it has received
		}
	}
}
