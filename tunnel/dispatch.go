package tunnel

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/internal/xread"
)

// stateMargin is how long a request's state outlives its deadline: long
// enough for a client retry or a late duplicate (clock offsets included) to
// find the stored answer, short enough that state never piles up.
const stateMargin = 10 * time.Second

// stateTTL is how long, from now, a request's state is kept when its
// deadline is deadline: stateMargin past it, bounded first (a caller's
// deadline may lie centuries ahead, and the sum must not overflow).
func stateTTL(deadline, now time.Time) time.Duration {
	return min(deadline.Sub(now), store.MaxStateTTL) + stateMargin
}

// serveRun is the state of one Serve call.
type serveRun struct {
	server *Server
	queues *queueSet
	slots  chan struct{} // one token per entry being handled
	// quietReaders counts the queues whose last read returned nothing;
	// their readers hold one slot, so readShare divides the slots among
	// the others. contendedAt and contendedBy say when, and for which
	// queue, a reader last had to wait for a slot (see acquire).
	quietReaders atomic.Int64
	contendedAt  atomic.Int64 // unix nanoseconds
	contendedBy  atomic.Pointer[queue]
	handlers     sync.WaitGroup
	pool         *handlerPool // the goroutines handlers run on
	completions  *batcher     // dead letters and answers to undecodable requests
	completer    *completer
	outcomes     objectPool[outcomeSpace] // one per request being handled
	requests     objectPool[received]     // reused once handled (see endHandling)
	frames       *batcher                 // streams' frames, one flush at a time
	running      runningSet
	deadlines    deadlineTimer // handlers' deadlines
	streams      openStreams
	// streamHandlers counts the stream handlers running; Serve waits for
	// them.
	streamHandlers sync.WaitGroup
	metrics        callMetrics
	observeRead    func(size int, full bool) // sizes of read batches
	// peers and handoffs: requests for methods this worker does not serve
	// go to a worker that does (see handOff).
	peers    peerView
	handoffs chan wire.Handoff
}

// runOnDelivery is the decision for a request on the fast path: its
// delivery is its claim.
func runOnDelivery() store.Decision { return store.Decision{Verdict: store.VerdictRun} }

// received is a decoded request entry a worker holds. One that was
// handled goes back to serveRun.requests when it ends (endHandling), so
// nothing may keep it past that: what the handler can reach is apart, in
// its handlerScope, and what the running set hands out is read under its
// lock (runningSet).
type received struct {
	entryID string
	// raw is the entry's envelope as read (env's payload shares its
	// memory), for a dead letter.
	raw string
	// lent are the buffers of Server.buffers raw is in, when it is large
	// (xread.Reader.LendBodies; only the payload shares them then): given
	// back once the request's outcome is written (see giveBack).
	lent []*[]byte
	env  *wire.Request
	// request is the decoded envelope, which env points to: decoded
	// into the received request, it costs no allocation of its own.
	request wire.Request
	method  *MethodDesc // nil when the service has no such method
	// deadline (Redis unix ms) ends the handler: the caller's for a unary
	// call, the attempt's time limit for an async request.
	deadline int64
	// state is the request's state hash: named by the request id, or by
	// the idempotency key for an async request; "" for a unary request on
	// the fast path.
	state string
	// fast marks a request on the fast path (see takesFastPath): no claim
	// in a state hash while it runs; its delivery is its claim.
	fast bool
	// takenFrom names the worker an entry was reclaimed from ("unknown"
	// when Redis did not say); "" for an entry read afresh.
	takenFrom string
	// key is the key that verified a signed request's caller
	// (ServerOptions.Trust, see caller); nil for an unsigned one.
	key *wire.CallerKey
	// denied is the PERMISSION_DENIED error the request gets instead of
	// its handler when its caller may not call its method.
	denied error
	// log is the request's logger once handled (Server.handlerLog).
	log requestLogger
	// handling is what handle makes for the request, allocated with it.
	handling handling
}

// readRequests takes requests of q in batches, never more than there are
// free handler slots, and processes them: new ones with XREADGROUP and,
// every reclaim interval, those a dead worker left behind (see reclaim).
// One loop does both so that the two never compete for slots.
//
// The loop moves between goroutines: when a read yields a request to run
// on the fast path, the reading goroutine runs the last such request
// itself and hands the loop (its reader) to another goroutine. The
// request's handler then starts without waiting for a goroutine to wake,
// which at low concurrency was a sixth of a call's latency; the wake-up
// moves to the next read, off the request's path.
func (r *serveRun) readRequests(ctx context.Context, q *queue) {
	// A reader starts quiet: its first read, which may block for a
	// reclaim interval on a queue nobody calls, takes one slot.
	r.quietReaders.Add(1)
	r.read(&reader{
		ctx:         ctx,
		queue:       q,
		backoff:     newBackoff(50*time.Millisecond, 2*time.Second),
		nextReclaim: time.Now().Add(r.server.reclaimInterval()),
		reclaimFrom: "0-0",
		quiet:       true,
		entries:     lendingReader(r.server, q),
	})
}

// lendingReader returns the reader of q's request stream, which reads
// large envelopes into buffers of the server's pool (given back by
// giveBack), so that a large request costs no allocation of its size,
// on a connection it keeps until its loop ends (Serve counts one per
// queue: see checkPool).
func lendingReader(s *Server, q *queue) *xread.Reader {
	entries := xread.NewReader(s.rdb, store.WorkersGroup, s.opts.WorkerID, q.requests, false)
	entries.LendBodies(&s.buffers)
	entries.KeepConn()
	return entries
}

// reader is a queue's read loop in progress: what it carries from one read
// to the next, whichever goroutine runs it.
type reader struct {
	// ctx is the Serve call's: it ends the loop. It travels with the loop
	// because the loop travels between goroutines.
	ctx         context.Context
	queue       *queue
	backoff     *backoff
	nextReclaim time.Time
	reclaimFrom string // where the next reclaim scan starts
	// quiet says the last read returned nothing: the next takes one slot
	// instead of the queue's share (readShare), so that a reader blocked
	// on a quiet queue holds one slot, not the slots the busy queues of
	// the server need. With two idle services beside a busy one, holding
	// the share cost the busy one a quarter of its calls/s.
	quiet bool
	// entries reads the queue's request stream (raw replies, no per-entry
	// maps: see package xread).
	entries *xread.Reader
}

// read runs rd's loop until rd.ctx ends, or until a read yields a request
// for this goroutine to run (see readRequests).
func (r *serveRun) read(rd *reader) {
	s, q, ctx := r.server, rd.queue, rd.ctx
	handedOn := false // the loop goes on on another goroutine
	defer func() {
		if !handedOn {
			rd.entries.Close() // the loop is over
		}
	}()
	// Reads are not cancelled mid-flight: entries Redis hands out must be
	// handled, so each read ends by its short block time instead.
	readCtx := context.WithoutCancel(ctx)
	interval := s.reclaimInterval()
	for {
		if !r.acquire(ctx, q) {
			return
		}
		want := r.readShare()
		if rd.quiet {
			want = 1
		}
		slots := 1 + r.takeSlots(q, want-1)
		if time.Now().After(rd.nextReclaim) {
			var used int
			rd.reclaimFrom, used = r.reclaimOnce(readCtx, q, rd.reclaimFrom, slots)
			rd.nextReclaim = time.Now().Add(interval)
			if slots -= used; slots == 0 {
				// A full scan: more may wait (a dead worker's, refused begins);
				// scan again once slots are free, not an interval later.
				rd.nextReclaim = time.Now()
				continue
			}
		}
		msgs, err := rd.entries.Read(readCtx, int64(slots), interval)
		r.releaseSlots(q, slots-len(msgs))
		if quiet := len(msgs) == 0; quiet != rd.quiet {
			rd.quiet = quiet
			r.quietReaders.Add(map[bool]int64{true: 1, false: -1}[quiet])
		}
		if len(msgs) > 0 {
			r.observeRead(len(msgs), len(msgs) == slots)
		}
		switch {
		case err == nil:
			rd.backoff.reset()
		case errors.Is(err, redis.Nil):
		default:
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("rpr: read request stream", "stream", q.requests, "error", err)
			if isMissingStream(err) {
				r.recreateGroup(ctx, q)
			}
			rd.backoff.wait(ctx)
		}
		mine := r.process(readCtx, q, msgs, nil, 0)
		if mine != nil {
			// The queue's goroutines (queueSet.workers) now include the
			// one that reads next; it has not started, so the count is
			// still held by this one.
			r.queues.workers.Add(1)
			handedOn = true
			r.pool.run(handlerJob{reader: rd})
			r.handlers.Add(1)
			r.runJob(handlerJob{queue: q, req: mine, decision: runOnDelivery()})
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// run starts the handler of a request this worker claimed, in the slot
// the request holds.
func (r *serveRun) run(q *queue, req *received, d store.Decision) {
	r.handlers.Add(1)
	r.pool.run(handlerJob{queue: q, req: req, decision: d})
}

// runJob is the handler pool's work: handle one request, then give back
// its slot unless its completion does; or go on with a queue's read loop.
func (r *serveRun) runJob(job handlerJob) {
	if job.reader != nil {
		defer r.queues.workers.Done()
		r.read(job.reader)
		return
	}
	if r.handle(job.queue, job.req, job.decision) {
		return // its completion ends it (see serveRun.completeLater)
	}
	r.releaseSlots(job.queue, 1)
	r.handlers.Done()
}

// recreateGroup restores the workers group after Redis lost it (restarted
// without persistence, or the stream was deleted).
func (r *serveRun) recreateGroup(ctx context.Context, q *queue) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := r.server.rdb.XGroupCreateMkStream(ctx, q.requests, store.WorkersGroup, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		r.server.log.Warn("rpr: recreate consumer group", "stream", q.requests, "error", err)
	}
}

// process handles entries this worker just received: read (previous nil)
// or reclaimed from other workers (previous maps each entry to the worker
// that held it, "" when not known); each holds a handler slot. Entries
// that cannot be decoded are dealt with one by one. Requests that take
// the fast path (takesFastPath) delivered for the first time and within
// their deadline run at once, with no round trip: their delivery is their
// claim. The rest go through beginScript together, which decides in one
// round trip which of them this worker may run.
//
// Of the entries that take the fast path (only ever read afresh), the last
// is not started but returned, for the reading goroutine to run itself
// with runOnDelivery's decision (see readRequests); it holds its slot.
//
// hops counts the handoffs the entries already had (see handOff): 0 for
// entries this worker read or reclaimed.
func (r *serveRun) process(ctx context.Context, q *queue, msgs []xread.Entry, previous map[string]string, hops int) (mine *received) {
	batch := make([]*received, 0, len(msgs))
	now := r.server.clock.toRedis(time.Now())

	for _, msg := range msgs {
		req := r.decode(q, msg)
		if req != nil && r.running.has(req.env.ID) {
			// Reclaimed from under ourselves (our lease lapsed while Redis
			// was unreachable): the handler is still ours and will complete.
			r.server.log.Info("rpr: reclaimed a request this worker is still running; left to its handler", "request_id", req.env.ID)
			req = nil
		}
		switch {
		case req == nil:
			r.releaseSlots(q, 1)
		case req.method == nil && r.handOff(ctx, q, req, hops):
			r.releaseSlots(q, 1)
		case previous == nil && takesFastPath(q, req) && now < req.deadline && r.server.trust.replaySafe(req):
			req.fast = true // no claim in a state hash
			if mine != nil {
				r.run(q, mine, runOnDelivery())
			}
			mine = req
		default:
			if req.state == "" {
				req.state = q.stateKey(req.env.ID)
			}
			if previous != nil {
				req.takenFrom = cmp.Or(previous[req.entryID], "unknown")
			}
			batch = append(batch, req)
		}
	}
	if len(batch) == 0 {
		return mine
	}
	if mine != nil {
		// Not kept waiting for beginScript's round trip.
		r.run(q, mine, runOnDelivery())
		mine = nil
	}
	decisions, err := r.begin(ctx, q, batch)
	if err != nil {
		// The entries stay pending; the reclaimer offers them again once
		// they have been idle for a lease.
		r.server.log.Warn("rpr: could not begin requests; they will be reclaimed", "count", len(batch), "error", err)
		r.releaseSlots(q, len(batch))
		return nil
	}
	for i, req := range batch {
		d := decisions[i]
		// Only the uncommon decisions log here; a logger with the request's
		// attributes is made for them alone, not for every request run.
		log := r.server.requestLog(req.env)
		switch d.Verdict {
		case store.VerdictRun, store.VerdictRerun, store.VerdictOrphan, store.VerdictHeld:
			if d.Verdict != store.VerdictRun && d.Verdict != store.VerdictHeld {
				log.Warn("rpr: took over a request whose worker's lease expired", "decision", d.Verdict, "previous_worker", d.Detail)
				r.server.stats.reclaimed.Add(1)
			}
			r.run(q, req, d)
			continue
		case store.VerdictExpired:
			log.Info("rpr: deadline passed before a worker took the request; not executed")
		case store.VerdictClosed:
			log.Info("rpr: the caller gave up before a worker took the request; not executed", "state", d.Detail)
		case store.VerdictResent:
			log.Info("rpr: request already finished; stored response sent again, handler not invoked", "state", d.Detail)
		case store.VerdictFinished:
			log.Info("rpr: async request already handled under its idempotency key; not run again", "key", req.env.Key, "state", d.Detail)
		case store.VerdictDuplicate:
			log.Info("rpr: request already running under another entry; duplicate retired", "worker", d.Detail)
		case store.VerdictBusy:
			log.Debug("rpr: request held by a live worker; left alone", "worker", d.Detail)
		case store.VerdictForeign:
			r.refuseForeign(q, req, d.Detail, false)
		default:
			log.Error("rpr: unknown begin decision", "decision", d.Verdict)
		}
		r.releaseSlots(q, 1)
	}
	return nil
}

// takesFastPath reports whether req of q, read afresh within its
// deadline, runs with no claim in a state hash (its delivery is its
// claim): when it is of a kind that does (fastPathKind) and, for an async
// request, every worker of the service knows it (a worker of an earlier
// release would run one it took over as a request that never ran).
func takesFastPath(q *queue, req *received) bool {
	return fastPathKind(req.env) && (req.env.Kind != wire.KindAsync || q.asyncFastPath.Load())
}

// fastPathKind reports whether env is of a kind that takes the fast path
// (store.BeginEntry.Fast): a unary call, whose answer is its record
// (store.Answer), and the first attempt of an async request without an
// idempotency key of its caller's, never replayed, whose success writes
// only its done marker (store.Done). What the begin script checks for
// those cannot have happened: nothing but a crash delivers such an entry
// twice (a retry, a replay and another request with the caller's key come
// as a later attempt, a replay or under that key, and take the begin
// script). For async requests that saves the begin script's three
// commands and its round trip, and two of the completion's four.
func fastPathKind(env *wire.Request) bool {
	switch env.Kind {
	case wire.KindUnary:
		return true
	case wire.KindAsync:
		return env.Attempt == 1 && env.Replays == 0 && (env.Key == "" || env.Key == env.ID)
	}
	return false
}

// begin runs the begin script over batch, which decides in one round trip
// which of its entries this worker may run.
func (r *serveRun) begin(ctx context.Context, q *queue, batch []*received) ([]store.Decision, error) {
	s := r.server
	call := store.NewBegin(q.keys, q.requests, s.opts.WorkerID, s.opts.Lease, stateMargin, s.deadAfter(), len(batch))
	for _, req := range batch {
		entry := store.BeginEntry{
			State:    req.state,
			EntryID:  req.entryID,
			Deadline: req.deadline,
			// A stream is never run twice: a broken one is its caller's
			// to open again.
			Idempotent: req.method != nil && req.method.Idempotent && req.env.Kind != wire.KindStream,
			Attempt:    req.env.Attempt,
			TakenFrom:  req.takenFrom,
			Fast:       fastPathKind(req.env) && r.server.trust.replaySafe(req),
		}
		if req.env.Kind == wire.KindUnary {
			entry.ReplyTo = req.env.ReplyTo
		}
		call.Add(entry)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	call.Use(s.dialect)
	store.Run(ctx, s.rdb, &call.Call)
	return call.Result()
}
