package tunnel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// clientService is what a Client keeps per service it calls: which workers
// were live in which lane, how long the queues were at the last look, the
// routing table, the shard count, and, once it makes unary calls, a
// response stream per shard with the calls waiting on them.
type clientService struct {
	name string
	// configuredShards is the shard count this client was built for (the
	// proto option or ClientOptions.Shards); the recorded count wins, and
	// a client never raises it.
	configuredShards int
	shardsWarned     atomic.Bool

	ready chan struct{} // closed when setup finished; then err is set
	err   error

	roster  atomic.Pointer[wire.Roster] // who serves it, as the last refresh read
	limits  atomic.Pointer[limitRules]  // rate-limit rules, refreshed with the rest
	backlog backlog
	routes  clientRoutes
	shards  shardPicker
	kick    chan struct{} // asks the watcher for a refresh now
	doze    serviceDoze

	// terms are the terms the shards' masters were seen in: a "never
	// ran" must come from the term that held the request (see termLog).
	terms       shardTerms
	termsWarned atomic.Bool

	respMu    sync.Mutex                                // serializes opening response streams
	responses [MaxShards]atomic.Pointer[responseStream] // by shard; nil until a unary call needs it

	defaultQueues [MaxShards]atomic.Pointer[queueKeys] // default lane's queue keys by shard, once named

	// waiting holds the unary calls waiting for their response, by
	// request id.
	waiting idMap[*callWaiter]

	mu      sync.Mutex
	streams map[string]*clientStream // open streaming calls, by request id
}

// responseStream is a client's response stream in one shard of a service,
// with the one reader that blocks on it.
type responseStream struct {
	key      string
	lastRead atomic.Value // string: id of the last response read
	// trimmed (a string) is the id the stream was last trimmed to. The
	// refresh loop and a caller's refresh (Client.anyLiveWorker) may run at
	// once; the worst either does with the other's value is one more trim.
	trimmed atomic.Value
}

// queueKeys name the request stream and retry set of one lane in one shard.
type queueKeys struct {
	requests, retries string
	requestsArg       any // requests, boxed once (the default lane's only)
}

// queueKeys names the queue of lane in shard. The default lane's names,
// which nearly every call needs, are made once.
func (s *clientService) queueKeys(keys store.Keyspace, shard int, lane string) *queueKeys {
	if lane != DefaultLane && lane != "" {
		sk := keys.Shard(s.name, shard)
		return &queueKeys{requests: sk.Requests(lane), retries: sk.Retries(lane)}
	}
	if q := s.defaultQueues[shard].Load(); q != nil {
		return q
	}
	sk := keys.Shard(s.name, shard)
	q := &queueKeys{requests: sk.Requests(DefaultLane), retries: sk.Retries(DefaultLane)}
	q.requestsArg = q.requests
	s.defaultQueues[shard].Store(q)
	return q
}

// requestStream names the request stream of lane in shard, as a command
// argument: the default lane's name is boxed once, so that an XADD does
// not box it again.
func (s *clientService) requestStream(keys store.Keyspace, shard int, lane string) any {
	if lane != DefaultLane && lane != "" {
		return keys.Shard(s.name, shard).Requests(lane)
	}
	return s.queueKeys(keys, shard, lane).requestsArg
}

// liveWorkers returns how many workers serve lane (all lanes for "").
func (s *clientService) liveWorkers(lane string) int {
	r := s.roster.Load()
	if r == nil {
		return 0
	}
	if lane == "" {
		n := 0
		for _, v := range r.Live {
			n += v
		}
		return n
	}
	return r.Live[lane]
}

// responseStreams returns the response streams opened so far.
func (s *clientService) responseStreams() []*responseStream {
	var out []*responseStream
	for i := range s.responses {
		if rs := s.responses[i].Load(); rs != nil {
			out = append(out, rs)
		}
	}
	return out
}

// service returns the state of a service, setting it up on first use: the
// first call to a service reads its state and starts its watcher. Setup
// failures are not remembered, so a later call tries again.
func (c *Client) service(ctx context.Context, name string, configuredShards int) (*clientService, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, notExecutedf(Canceled, "%s: client closed", name)
	}
	s, ok := c.services[name]
	if !ok {
		if n := c.opts.Shards[name]; configuredShards <= 0 && n > 0 {
			configuredShards = n
		}
		s = &clientService{
			name:             name,
			configuredShards: max(configuredShards, 1),
			ready:            make(chan struct{}),
			kick:             make(chan struct{}, 1),
		}
		s.shards.count.Store(1) // until the recorded count is read: shard 0 is always served
		_, s.terms.perShard = c.rdb.(*redis.ClusterClient)
		s.doze.markUsed(time.Now())
		c.services[name] = s
		c.wg.Add(1)
		go c.startService(s)
	}
	c.mu.Unlock()

	select {
	case <-s.ready: // set up: ctx's Done channel, which some contexts make on demand, is not needed
	default:
		select {
		case <-s.ready:
		case <-ctx.Done():
			e := notExecutedf(contextCode(ctx), "%s: %v while connecting to the service's streams; nothing was sent", name, ctx.Err())
			e.cause = errNeverSent
			return nil, e
		}
	}
	if s.err != nil {
		return nil, s.err
	}
	c.use(ctx, s)
	return s, nil
}

// startService reads s's state and, when that works, runs its watcher.
func (c *Client) startService(s *clientService) {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	err := c.setUp(ctx, s)
	cancel()
	if err != nil {
		s.err = notExecutedf(Unavailable, "%s: cannot reach Redis to set up calls to the service: %v", s.name, err)
		c.mu.Lock()
		delete(c.services, s.name)
		c.mu.Unlock()
		close(s.ready)
		return
	}
	close(s.ready)
	c.routeChanges.watch(c.keys.RoutesChanged(s.name), s.kick)
	c.wg.Add(1)
	go c.watch(s)
}

// setUp reads the service's state. A client never records a shard count:
// a caller must not be able to make every server of a service open more
// readers than its pool holds (servers raise the count as they start, and
// operators with rpr shards set).
func (c *Client) setUp(ctx context.Context, s *clientService) error {
	return c.refresh(ctx, s)
}

// openResponses creates s's response stream in shard and starts its
// reader, once: only unary calls need them, so a client that only enqueues
// async requests keeps no stream and no blocked reader.
func (c *Client) openResponses(ctx context.Context, s *clientService, shard int) (*responseStream, error) {
	if rs := s.responses[shard].Load(); rs != nil {
		return rs, nil // every call but the first to the shard: no lock
	}
	s.respMu.Lock()
	defer s.respMu.Unlock()
	if rs := s.responses[shard].Load(); rs != nil {
		return rs, nil
	}
	c.mu.Lock()
	err := checkPool(c.rdb, c.blockingReads+1, "this Client")
	c.mu.Unlock()
	if err != nil {
		return nil, notExecutedf(ResourceExhausted, "%s: %v", s.name, err)
	}
	rs := &responseStream{key: c.keys.Shard(s.name, shard).Responses(c.opts.ID)}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.createResponseStream(ctx, rs); err != nil {
		return nil, notExecutedf(Unavailable, "%s: set up response stream: %v", s.name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, notExecutedf(Canceled, "%s: client closed", s.name)
	}
	s.responses[shard].Store(rs)
	c.blockingReads++
	c.wg.Add(1)
	go c.readResponses(s, rs)
	return rs, nil
}

// createResponseStream makes the response stream and its group (both may
// exist already after a reconnect) and sets its expiry.
func (c *Client) createResponseStream(ctx context.Context, rs *responseStream) error {
	err := c.rdb.XGroupCreateMkStream(ctx, rs.key, store.ResponseGroup, "$").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("create %s: %w", rs.key, err)
	}
	if err := c.rdb.PExpire(ctx, rs.key, responseStreamTTL).Err(); err != nil {
		return fmt.Errorf("set expiry of %s: %w", rs.key, err)
	}
	return nil
}

// refresh reads, in one round trip, Redis's clock, the service's worker
// heartbeats, routing table, shard count and rate limits, and its backlog
// (every lane the table names, every shard); and it extends the life of
// the client's response streams and trims the responses already read. It
// recreates a response stream that disappeared (Redis restarted or evicted
// it).
func (c *Client) refresh(ctx context.Context, s *clientService) error {
	pipe := c.rdb.Pipeline()
	sentAt := time.Now()
	timeCmd := pipe.Time(ctx)
	workers := pipe.HGetAll(ctx, c.keys.Workers(s.name))
	routes := pipe.HGetAll(ctx, c.keys.Routes(s.name))
	count := pipe.Get(ctx, c.keys.ShardCount(s.name))
	limits := pipe.HGetAll(ctx, c.keys.Limits(s.name)) // rate limits
	lanes := append([]string{DefaultLane}, s.routes.lanes()...)
	shards := int(s.shards.count.Load())
	probes := c.queueTermProbes(ctx, pipe, s, 0, shards)
	var queued []*redis.IntCmd
	for shard := range shards {
		sk := c.keys.Shard(s.name, shard)
		for _, lane := range lanes {
			queued = append(queued, pipe.XLen(ctx, sk.Requests(lane)), pipe.ZCard(ctx, sk.Retries(lane)))
		}
	}
	streams := s.responseStreams()
	expires := renewResponseStreams(ctx, pipe, streams)
	trims := make([]*redis.IntCmd, len(streams))
	trimTo := make([]string, len(streams))
	for i, rs := range streams {
		if last, _ := rs.lastRead.Load().(string); last != "" && last != rs.trimmed.Load() {
			trims[i], trimTo[i] = pipe.XTrimMinID(ctx, rs.key, last), last // only when more was read: an idle client sends none
		}
	}
	_, _ = pipe.Exec(ctx) // each command is judged below
	c.observeTerms(ctx, s, 0, probes)
	for _, cmd := range []redis.Cmder{timeCmd, workers} {
		if err := cmd.Err(); err != nil {
			return err
		}
	}
	redisNow := timeCmd.Val()
	c.clock.observe(redisNow, sentAt, time.Now())
	roster := wire.ReadRoster(workers.Val(), redisNow.UnixMilli(), DefaultLane)
	s.roster.Store(&roster)
	if len(roster.Live) > 0 {
		c.breakers.serviceLive(s.name) // calls refused for want of a server may go
	}
	s.checkStreamWorkers(workers.Val(), redisNow.UnixMilli())
	var size int64
	for _, cmd := range queued {
		size += cmd.Val() // a missing key (or a failed read) counts as empty
	}
	s.backlog.observe(size, sentAt)
	c.observeShards(ctx, s, count)
	if err := routes.Err(); err != nil {
		c.log.Warn("rpr: read routing table; keeping the last one read", "key", c.keys.Routes(s.name), "error", err)
	} else if errs := s.routes.observe(s.name, routes.Val()); len(errs) > 0 {
		c.log.Warn("rpr: routing table has entries that do not decode; they are ignored", "service", s.name, "error", errors.Join(errs...))
	}
	if err := limits.Err(); err != nil {
		// A broken limits key (say, set by hand to another type) must not
		// stop liveness and backlog from being refreshed: keep the last
		// rules and say what is wrong.
		c.log.Warn("rpr: read rate limits; keeping the last ones read", "key", c.keys.Limits(s.name), "error", err)
	} else {
		c.observeLimits(s, limits.Val())
	}
	for i, rs := range streams {
		if trims[i] != nil && trims[i].Err() == nil {
			rs.trimmed.Store(trimTo[i])
		}
	}
	return c.recreateExpired(ctx, streams, expires)
}

// observeShards follows the service's recorded shard count (GET's reply;
// none recorded is one shard), and says once when this client was built
// for more. When the count rises it first reads the terms of the new
// shards' masters: calls go to them once the count is stored, and one
// that gives up there could otherwise not be told it was not executed
// until the next refresh had read them (sameTerm).
func (c *Client) observeShards(ctx context.Context, s *clientService, count *redis.StringCmd) {
	raw, err := count.Result()
	n := 1
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return // unreachable: keep the last count
	default:
		n = store.ParseShardCount(raw, nil)
	}
	if s.configuredShards > n && s.shardsWarned.CompareAndSwap(false, true) {
		c.log.Warn("rpr: this client is configured for more shards than the service has; it follows the service's count (raise it with the servers' (rpr.v1.service).shards or rpr shards set)",
			"service", s.name, "configured", s.configuredShards, "recorded", n)
	}
	if known := int(s.shards.count.Load()); n > known {
		c.probeTerms(ctx, s, known, n)
	}
	if old := s.shards.count.Swap(int32(n)); int(old) != n {
		c.log.Info("rpr: following the service's shard count recorded in Redis", "service", s.name, "shards", n, "was", old)
	}
}

// watch refreshes s every wire.BeatInterval, and at once when its routing
// table changes, until the client closes; while s dozes (see
// serviceDoze) it only keeps s's response streams alive.
func (c *Client) watch(s *clientService) {
	defer c.wg.Done()
	t := time.NewTicker(wire.BeatInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
		if c.dozes(s, time.Now()) {
			continue // the next call reads the state, routes included
		}
		ctx, cancel := context.WithTimeout(c.ctx, wire.BeatInterval*3)
		if err := c.refresh(ctx, s); err != nil && c.ctx.Err() == nil {
			c.log.Warn("rpr: refresh service state", "service", s.name, "error", err)
		}
		cancel()
	}
}

// addStream registers an open stream, for its frames.
func (s *clientService) addStream(id string, cs *clientStream) {
	s.mu.Lock()
	if s.streams == nil {
		s.streams = map[string]*clientStream{}
	}
	s.streams[id] = cs
	s.mu.Unlock()
}

// removeStream unregisters an ended stream.
func (s *clientService) removeStream(id string) {
	s.mu.Lock()
	delete(s.streams, id)
	s.mu.Unlock()
}

// stream returns open stream id, nil when there is none.
func (s *clientService) stream(id string) *clientStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[id]
}

// checkStreamWorkers ends the accepted streams whose worker is no longer
// live in the workers hash just read at Redis time nowMs.
func (s *clientService) checkStreamWorkers(hash map[string]string, nowMs int64) {
	s.mu.Lock()
	var gone []*clientStream
	for _, cs := range s.streams {
		cs.mu.Lock()
		worker, accepted := cs.worker, cs.accepted
		cs.mu.Unlock()
		if !accepted {
			continue
		}
		if w, ok := wire.ParseWorker(hash[worker]); !ok || !w.LiveAt(nowMs) {
			gone = append(gone, cs)
		}
	}
	s.mu.Unlock()
	for _, cs := range gone {
		cs.workerGone()
	}
}

// callWaiter is where a waiting unary call's outcome arrives, once: its
// response, or the error that ended it; or, instead, the news that the
// call's context ended (wake). Whichever comes first signals done, once,
// so a call waits on this one channel alone and always gets it back empty.
type callWaiter struct {
	done  chan struct{} // buffered: signalled once, by deliver or wake
	res   callResult    // set by deliver before it signals
	state atomic.Int32  // waiterOpen until deliver or wake settles it
}

// The states of a callWaiter.
const (
	waiterOpen int32 = iota
	waiterDelivered
	waiterWoken
)

// deliver sets w's outcome and wakes its call, unless the call was woken
// by its context's end first: then it reports false, and the outcome is
// the deliverer's to dispose of. Only the one who took w from
// clientService.waiting calls it.
func (w *callWaiter) deliver(res callResult) bool {
	if !w.state.CompareAndSwap(waiterOpen, waiterDelivered) {
		return false
	}
	w.res = res
	w.done <- struct{}{}
	return true
}

// wake ends w's wait without an outcome, its call's context having
// ended, unless an outcome was delivered first.
func (w *callWaiter) wake() {
	if w.state.CompareAndSwap(waiterOpen, waiterWoken) {
		w.done <- struct{}{}
	}
}

// delivered reports whether the wait ended with an outcome (deliver)
// rather than with the call's context (wake); read after done signalled.
func (w *callWaiter) delivered() bool { return w.state.Load() == waiterDelivered }

// expect registers w as the call waiting for the response to id.
func (s *clientService) expect(id string, w *callWaiter) { s.waiting.put(id, w) }

// forget drops a waiting call.
func (s *clientService) forget(id string) { s.waiting.remove(id) }

// complete hands res to the call waiting for id; false if none waits.
func (s *clientService) complete(id string, res callResult) bool {
	w, ok := s.waiting.take(id)
	return ok && w.deliver(res) // taken: no one else delivers to it
}

// answer hands a copy of resp, from responses, to the call waiting for
// it, with lent (the buffers its payload is in) for the call to give back
// as well; false if none waits. resp may be its caller's, on the stack.
func (s *clientService) answer(resp *wire.Response, lent []*[]byte, responses *objectPool[wire.Response]) bool {
	w, ok := s.waiting.take(resp.ID)
	if !ok {
		return false
	}
	kept := responses.get()
	*kept = *resp
	if !w.deliver(callResult{resp: kept, lent: lent}) {
		responses.put(kept) // the call's context ended first
		return false
	}
	return true
}

// failAll ends every waiting call and open stream with err.
func (s *clientService) failAll(err error) {
	waiting := s.waiting.takeAll()
	s.mu.Lock()
	streams := s.streams
	s.streams = nil
	s.mu.Unlock()
	for _, w := range waiting {
		w.deliver(callResult{err: err})
	}
	for _, cs := range streams {
		cs.fail(err, true)
	}
}
