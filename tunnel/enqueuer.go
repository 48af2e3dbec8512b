package tunnel

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// enqueuing is one async request waiting to be written.
type enqueuing struct {
	stream, retries string // the service's request stream and retry set
	capacity        int64
	due             int64 // Redis unix ms; 0 for at once
	raw             []byte
	// state moves from opQueued to opTaken when a flusher takes the
	// request, or to opAbandoned when its caller gives up first.
	state  atomic.Int32
	result chan enqueueResult
}

// enqueueResult is enqueueScript's verdict on one request.
type enqueueResult struct {
	queued  bool
	backlog int64
	err     error
}

// enqueuer writes async requests in batches: whatever is queued when a
// flusher is free goes out as one enqueueScript call per service, all in
// one pipeline, so the cap check (two commands) is paid once per batch
// rather than once per request. A lone request leaves at once.
type enqueuer struct {
	*coalescer[*enqueuing]
	rdb redis.UniversalClient
}

func newEnqueuer(rdb redis.UniversalClient, flushers, maxBatch, queueSize int, observe func(size int, full bool)) *enqueuer {
	e := &enqueuer{rdb: rdb}
	e.coalescer = newCoalescer(flushers, maxBatch, queueSize, e.flush, observe)
	return e
}

// flush writes batch, one script call per service.
func (e *enqueuer) flush(batch []*enqueuing) {
	// Requests must be written whatever happens to their callers once
	// taken (the caller then waits for the verdict), so the pipeline runs
	// on its own context.
	ctx := context.Background()
	type group struct {
		items []*enqueuing
		call  *scriptCall
		cmd   redis.Cmder
	}
	var groups []*group
	byStream := map[string]*group{}
	for _, item := range batch {
		if !item.state.CompareAndSwap(opQueued, opTaken) {
			continue // abandoned: never sent
		}
		g := byStream[item.stream]
		if g == nil {
			g = &group{call: &scriptCall{script: enqueueScript, keys: []string{item.stream, item.retries}}}
			byStream[item.stream] = g
			groups = append(groups, g)
		}
		g.items = append(g.items, item)
		g.call.args = append(g.call.args, item.capacity, item.due, item.raw)
	}
	if len(groups) == 0 {
		return
	}
	pipe := e.rdb.Pipeline()
	for _, g := range groups {
		g.cmd = g.call.evalSha(ctx, pipe)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for _, g := range groups {
		if isNoScript(g.cmd.Err()) {
			g.cmd = g.call.script.Eval(ctx, e.rdb, g.call.keys, g.call.args...)
		}
		out, err := g.cmd.(*redis.Cmd).Int64Slice()
		if err == nil && len(out) != 2*len(g.items) {
			err = fmt.Errorf("enqueue script answered %d values for %d requests", len(out), len(g.items))
		}
		for i, item := range g.items {
			if err != nil {
				item.result <- enqueueResult{err: err}
				continue
			}
			item.result <- enqueueResult{queued: out[2*i] == 1, backlog: out[2*i+1]}
		}
	}
}
