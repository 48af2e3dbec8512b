package tunnel

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
)

// queue is one request stream a server reads: its lane of one shard of a
// service. Each queue has its own reader, retry mover and janitor, and
// every script run for its requests touches only its shard's keys.
type queue struct {
	*serverService
	shard    int
	keys     store.Shard
	requests string // the lane's request stream
	retries  string // the lane's retry set
	// held counts the handler slots the queue's requests hold, and freed
	// is signalled when it gives one back (see acquire).
	held  atomic.Int64
	freed chan struct{}
	// retryAdded wakes the queue's mover (moveDue) when this server put a
	// request in the retry set.
	retryAdded chan struct{}
}

// notifyRetry wakes q's mover, which may be waiting out an idle interval.
func (q *queue) notifyRetry() {
	select {
	case q.retryAdded <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// stateKey is the state hash of one of the queue's requests.
func (q *queue) stateKey(requestID string) string { return q.keys.State(requestID) }

// newQueue returns the queue of svc's shard in the server's lane.
func (s *Server) newQueue(svc *serverService, shard int) *queue {
	keys := s.keys.Shard(svc.name, shard)
	return &queue{
		serverService: svc,
		shard:         shard,
		keys:          keys,
		requests:      keys.Requests(s.opts.Lane),
		retries:       keys.Retries(s.opts.Lane),
		freed:         make(chan struct{}, 1),
		retryAdded:    make(chan struct{}, 1),
	}
}

// queueSet is the queues a Serve call reads. It grows while serving, when
// a service's recorded shard count rises, and stops as a whole.
type queueSet struct {
	mu      sync.Mutex
	stopped bool
	queues  []*queue
	// expected is how many queues Serve is starting, so that the first
	// readers already leave slots for the others (see readShare).
	expected int
	workers  sync.WaitGroup // every queue's goroutines
}

// add starts run for q unless the set has stopped; false when it has.
func (qs *queueSet) add(q *queue, run ...func()) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.stopped {
		return false
	}
	qs.queues = append(qs.queues, q)
	for _, f := range run {
		qs.workers.Go(f)
	}
	return true
}

// has reports whether the set reads shard of service.
func (qs *queueSet) has(service string, shard int) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return slices.ContainsFunc(qs.queues, func(q *queue) bool { return q.name == service && q.shard == shard })
}

// list returns the queues read now.
func (qs *queueSet) list() []*queue {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return slices.Clone(qs.queues)
}

// count returns how many queues are read now, or are about to be.
func (qs *queueSet) count() int {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return max(len(qs.queues), qs.expected)
}

// expect says that n queues are about to start.
func (qs *queueSet) expect(n int) {
	qs.mu.Lock()
	qs.expected = n
	qs.mu.Unlock()
}

// stop lets no queue start and waits for the goroutines of those started
// (they end when the Serve context does).
func (qs *queueSet) stop() {
	qs.mu.Lock()
	qs.stopped = true
	qs.mu.Unlock()
	qs.workers.Wait()
}

// shardsToRead returns the shards of a service with count shards that
// this server reads: all, or those of ServerOptions.OnlyShards.
func (s *Server) shardsToRead(count int) []int {
	var out []int
	for shard := range count {
		if len(s.opts.OnlyShards) == 0 || slices.Contains(s.opts.OnlyShards, shard) {
			out = append(out, shard)
		}
	}
	return out
}

// openQueue makes sure q's stream and consumer group exist.
func (s *Server) openQueue(ctx context.Context, q *queue) error {
	// "0": a new group delivers what is already queued; nothing is lost.
	err := s.rdb.XGroupCreateMkStream(ctx, q.requests, store.WorkersGroup, "0").Err()
	if err != nil && strings.HasPrefix(err.Error(), "OOM") && s.groupExists(ctx, q.requests) {
		// Redis at its maxmemory refuses XGROUP CREATE before it sees that
		// the group is there already: a server restarted then still serves.
		err = nil
	}
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("rpr: create consumer group %s on %s: %w", store.WorkersGroup, q.requests, err)
	}
	if q.streams {
		return s.openInbox(ctx, q)
	}
	return nil
}

// groupExists reports whether stream has rpr's consumer group; false also
// when Redis cannot say.
func (s *Server) groupExists(ctx context.Context, stream string) bool {
	groups, err := s.rdb.XInfoGroups(ctx, stream).Result()
	return err == nil && slices.ContainsFunc(groups, func(g redis.XInfoGroup) bool { return g.Name == store.WorkersGroup })
}

// serveQueue starts reading q, with its retry mover and janitor.
func (r *serveRun) serveQueue(ctx context.Context, q *queue) bool {
	s := r.server
	run := []func(){
		func() { r.readRequests(ctx, q) },
		func() { r.moveDue(ctx, q) },
		func() { r.tidy(ctx, q) },
	}
	if q.streams {
		run = append(run, func() { r.readInbox(ctx, q) })
	}
	started := r.queues.add(q, run...)
	if started {
		s.log.Info("rpr: serving "+q.name, "stream", q.requests, "shard", q.shard, "lane", s.opts.Lane, "concurrency", s.opts.Concurrency, "lease", s.opts.Lease)
	}
	return started
}

// followShards starts reading the shards of svc that a raise of its
// recorded shard count to count added; the heartbeat reads the count every
// wire.BeatInterval. (Shards are never given up while serving: requests a
// client sent just before a lowering are still read.) Nothing starts once
// ctx, the Serve context, has ended.
func (r *serveRun) followShards(ctx context.Context, svc *serverService, count int) {
	s := r.server
	for _, shard := range s.shardsToRead(count) {
		if ctx.Err() != nil || r.queues.has(svc.name, shard) {
			continue
		}
		q := s.newQueue(svc, shard)
		if err := s.openQueue(ctx, q); err != nil {
			s.log.Warn("rpr: open a new shard", "service", svc.name, "shard", shard, "error", err)
			continue
		}
		s.log.Info("rpr: the service's shard count rose; reading the new shard", "service", svc.name, "shard", shard)
		r.serveQueue(ctx, q)
	}
}
