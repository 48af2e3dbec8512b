package tunnel

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
)

// completion is one request's outcome waiting to be written, by the
// script its kind names. A fast answer (store.Answer) uses the
// Completion's Target, EntryID, Response and, when the server keeps
// finished calls, Record and RecordKey; a fast done (store.Done) its
// State and EntryID.
type completion struct {
	queue *queue
	req   *received
	kind  completionKind
	store.Completion
	// result is the verdict (store.Written, store.CallerGone or
	// store.Fenced) or an error, set before written is signalled.
	result completionResult
	// written is what complete waits on (buffered: signalled once by the
	// flush). A completion without one is one nobody waits for
	// (serveRun.completeLater): the flush tells the completer's written
	// func instead.
	written chan struct{}
}

// completionKind says which script writes a completion.
type completionKind uint8

const (
	// completeClaimed: a request claimed in its state, or a fast one's
	// failure (store.Complete).
	completeClaimed completionKind = iota
	// answerFast: a unary request's answer on the fast path (store.Answer).
	answerFast
	// doneFast: an async request's success on the fast path (store.Done).
	doneFast
)

type completionResult struct {
	n   int64
	err error
}

// completer writes completions in batches: whatever is queued when a
// flush slot is free goes out as one script call per queue (a lane of a
// service shard) and kind, all in one pipeline. Under load that is one
// script run for dozens of requests.
type completer struct {
	*coalescer[*completion]
	rdb      redis.UniversalClient
	workerID string
	// dialect is the form of scripts the server's Redis runs.
	dialect store.Dialect
	// maxDeadLetters caps each dead-letter stream (0: no cap).
	maxDeadLetters int64
	// retention is how long fast-path answers keep their finished records
	// (ServerOptions.Retention); 0 for not at all.
	retention time.Duration
	// signals holds the channels complete waits on.
	signals signalPool
	// written is told of each completion nobody waits for once its
	// result is set, on the flushing goroutine; it must not block.
	written func(*completion)
	// answers are the answer calls of earlier flushes, for the next to
	// reuse (one flush runs at a time: see newCompleter).
	answers []*store.Answer
}

// newCompleter returns the completer of s's requests; written is told of
// the completions nobody waits for (see completion.written).
func newCompleter(s *Server, queueSize int, observe func(size int, full bool), written func(*completion)) *completer {
	c := &completer{rdb: s.rdb, dialect: s.dialect, maxDeadLetters: s.deadLetterCap(), workerID: s.opts.WorkerID, retention: s.opts.Retention, written: written}
	// One flush in flight, as for the client's sends (see NewClient).
	c.coalescer = newCoalescer(1, 256, queueSize, c.flush, observe)
	return c
}

// complete queues one completion and waits for its result.
func (c *completer) complete(comp *completion) completionResult {
	written := c.signals.get()
	comp.written = written
	defer func() {
		// The channel is empty again (signalled once and received once,
		// or never queued) and goes to another completion: comp must not
		// keep it, or a later write of comp would signal that one.
		comp.written = nil
		c.signals.put(written)
	}()
	if err := c.submit(context.Background(), comp); err != nil {
		return completionResult{err: err}
	}
	<-written
	return comp.result
}

// completionGroup is the completions of one queue and kind, written by one
// script call: call, to which add adds a completion, and whose verdicts
// result returns, one per completion in order.
type completionGroup struct {
	queue  *queue
	kind   completionKind
	items  []*completion
	call   *store.Call
	add    func(*completion)
	result func() ([]int64, error)
	answer *store.Answer // the call of an answerFast group, reused
}

// newCompletionGroup starts the group of comp's queue and kind, for up to
// size completions.
func (c *completer) newCompletionGroup(comp *completion, size int) *completionGroup {
	g := &completionGroup{queue: comp.queue, kind: comp.kind}
	q := comp.queue
	switch g.kind {
	case answerFast:
		var a *store.Answer
		if n := len(c.answers); n > 0 {
			a = c.answers[n-1]
			c.answers = c.answers[:n-1]
		} else {
			a = new(store.Answer)
		}
		a.Start(q.requests, c.retention, size)
		g.call, g.result, g.answer = &a.Call, a.Result, a
		g.add = func(comp *completion) { a.Add(comp.Target, comp.EntryID, comp.Response, comp.RecordKey, comp.Record) }
	case doneFast:
		d := store.NewDone(q.requests, c.workerID, comp.TTL, size)
		g.call, g.result = &d.Call, d.Result
		g.add = func(comp *completion) { d.Add(comp.State, comp.EntryID, comp.req.env.Attempt) }
	default:
		cc := store.NewComplete(q.requests, q.retries, c.workerID, c.maxDeadLetters, size)
		g.call, g.result = &cc.Call, cc.Result
		g.add = func(comp *completion) { cc.Add(&comp.Completion) }
	}
	return g
}

// flush writes batch, one script call per queue and kind.
func (c *completer) flush(batch []*completion) {
	// The answers must be written whatever happens to the callers, so the
	// calls run on their own context.
	ctx := context.Background()
	var groups []*completionGroup
	for _, comp := range batch {
		g := groupFor(groups, comp)
		if g == nil {
			g = c.newCompletionGroup(comp, len(batch))
			groups = append(groups, g)
		}
		g.items = append(g.items, comp)
		g.add(comp)
	}
	calls := make([]*store.Call, len(groups))
	for i, g := range groups {
		calls[i] = g.call
		calls[i].Use(c.dialect)
	}
	store.Run(ctx, c.rdb, calls...)
	for _, g := range groups {
		results, err := g.result()
		for i, comp := range g.items {
			if err != nil {
				comp.result = completionResult{err: err}
			} else {
				comp.result = completionResult{n: results[i]}
			}
			if comp.written == nil {
				c.written(comp) // may reuse comp
			} else {
				comp.written <- struct{}{}
			}
		}
		if g.answer != nil {
			c.answers = append(c.answers, g.answer)
		}
	}
}

// groupFor returns the group comp belongs to, nil if there is none yet.
// Batches hold few queues, so a scan beats a map.
func groupFor(groups []*completionGroup, comp *completion) *completionGroup {
	for _, g := range groups {
		if g.queue == comp.queue && g.kind == comp.kind {
			return g
		}
	}
	return nil
}
