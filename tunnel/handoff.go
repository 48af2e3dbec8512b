package tunnel

// Rolling deploys: while workers of two releases serve one lane, a request
// for a method only the newer release has may reach a worker of the older
// one. That worker does not answer UNIMPLEMENTED while a live worker of its
// lane and shard lists the method in its record: it hands the entry over
// (store.Handoff moves it into that worker's pending entries and tells it
// on the service's handoff channel), and that worker runs it. A worker
// answers UNIMPLEMENTED only when no live worker serves the method.

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/internal/xread"
)

// peersMaxAge is how old a worker's view of its peers may be when it
// looks for one to hand a request to; an older view is read again (one
// round trip, only while requests for unknown methods arrive).
const peersMaxAge = 250 * time.Millisecond

// peerView is a worker's view of the records in its services' workers
// hashes, read when a request for an unknown method needs it.
type peerView struct {
	mu    sync.Mutex
	views map[string]peers // by service
}

type peers struct {
	read    time.Time // local time of the read
	redisMs int64     // Redis's time at the read
	records map[string]wire.Worker
}

// servers returns the live peers of this worker that serve method of q's
// service in its lane and shard, reading the workers hash again when the
// view is older than peersMaxAge.
func (r *serveRun) servers(ctx context.Context, q *queue, method string) []string {
	s := r.server
	v := &r.peers
	v.mu.Lock()
	view, ok := v.views[q.name]
	v.mu.Unlock()
	if !ok || time.Since(view.read) > peersMaxAge {
		all, err := s.rdb.HGetAll(ctx, s.keys.Workers(q.name)).Result()
		if err != nil {
			s.log.Warn("rpr: read the workers of the service to hand a request over", "service", q.name, "error", err)
			return nil
		}
		view = peers{read: time.Now(), redisMs: s.clock.toRedis(time.Now()), records: map[string]wire.Worker{}}
		for id, raw := range all {
			if w, ok := wire.ParseWorker(raw); ok {
				view.records[id] = w
			}
		}
		v.mu.Lock()
		if v.views == nil {
			v.views = map[string]peers{}
		}
		v.views[q.name] = view
		v.mu.Unlock()
	}
	var out []string
	for id, w := range view.records {
		// A record without Methods is of a release without handoffs: it
		// could not take one.
		if id == s.opts.WorkerID || w.Methods == nil || !slices.Contains(w.Methods, method) ||
			!w.LiveAt(view.redisMs) || store.LaneOrDefault(w.Lane) != store.LaneOrDefault(s.opts.Lane) || !readsShard(w, q.shard) {
			continue
		}
		out = append(out, id)
	}
	return out
}

// readsShard reports whether w reads shard of its service.
func readsShard(w wire.Worker, shard int) bool {
	if len(w.Shards) == 0 {
		return shard == 0
	}
	return slices.Contains(w.Shards, shard)
}

// handOff gives req, for a method this worker does not serve, to a live
// peer that serves it; hops counts the handoffs the entry already had. It
// reports whether the entry left this worker (handed over, or no longer
// pending), so the caller must not answer it.
func (r *serveRun) handOff(ctx context.Context, q *queue, req *received, hops int) bool {
	s := r.server
	_, method, _ := strings.Cut(req.env.Method, "/")
	if hops >= wire.MaxHandoffHops || method == "" {
		return false
	}
	candidates := r.servers(ctx, q, method)
	if len(candidates) == 0 {
		return false
	}
	to := candidates[rand.IntN(len(candidates))]
	msg, err := json.Marshal(wire.Handoff{To: to, Stream: q.requests, Entry: req.entryID, Hops: hops + 1})
	if err != nil {
		return false
	}
	call := store.NewHandoff(q.requests, to, req.entryID, s.keys.Handoffs(q.name), msg)
	store.Run(ctx, s.rdb, &call.Call)
	if _, err := call.Result(); err != nil {
		s.log.Warn("rpr: could not hand a request for an unknown method to a worker that serves it", "request_id", req.env.ID, "method", req.env.Method, "to", to, "error", err)
		return false
	}
	s.requestLog(req.env).Info("rpr: this worker does not serve the method; handed the request to a worker that does", "to", to, "hops", hops+1)
	return true
}

// handoffQueue is how many handoffs a worker takes in before it drops one
// (which stays pending and is reclaimed once this worker is gone).
const handoffQueue = 1024

// takeHandoffs runs the requests other workers handed to this one, until
// ctx ends.
func (r *serveRun) takeHandoffs(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case h := <-r.handoffs:
			r.takeHandoff(ctx, h)
		}
	}
}

// takeHandoff reads the entry h names, which is already this worker's,
// and processes it as if this worker had read it.
func (r *serveRun) takeHandoff(ctx context.Context, h wire.Handoff) {
	s := r.server
	var q *queue
	for _, cand := range r.queues.list() {
		if cand.requests == h.Stream {
			q = cand
		}
	}
	if q == nil {
		s.log.Warn("rpr: handed a request of a stream this worker does not read; it stays pending until reclaimed", "stream", h.Stream, "entry", h.Entry)
		return
	}
	if !r.acquire(ctx, q) {
		return // stays pending: reclaimed once this worker is gone
	}
	msgs, err := s.rdb.XRangeN(context.WithoutCancel(ctx), h.Stream, h.Entry, h.Entry, 1).Result()
	if err != nil || len(msgs) == 0 {
		r.releaseSlots(q, 1)
		if err != nil && !errors.Is(err, redis.Nil) {
			s.log.Warn("rpr: read a handed request; it stays pending until reclaimed", "stream", h.Stream, "entry", h.Entry, "error", err)
		}
		return // gone: its caller gave up and deleted it
	}
	if mine := r.process(ctx, q, xread.FromMessages(msgs), nil, h.Hops); mine != nil {
		r.run(q, mine, runOnDelivery())
	}
}

// onHandoff queues a handoff message meant for this worker; it runs on
// the subscription's goroutine, so it never blocks.
func (r *serveRun) onHandoff(payload string) {
	h, err := wire.ParseHandoff(payload)
	if err != nil {
		r.server.log.Warn("rpr: malformed handoff message; ignored", "error", err)
		return
	}
	if h.To != r.server.opts.WorkerID {
		return
	}
	select {
	case r.handoffs <- h:
	default:
		r.server.log.Warn("rpr: too many handoffs waiting; this one stays pending until reclaimed", "entry", h.Entry)
	}
}
