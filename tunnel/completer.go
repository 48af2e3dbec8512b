package tunnel

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
)

// completion is one request's outcome waiting to be written: a fast-path
// answer (store.Answer) when fast, else a store.Completion. A fast
// answer uses the Completion's Target, EntryID, Response and, when the
// server keeps finished calls, Record and RecordKey.
type completion struct {
	queue *queue
	req   *received
	fast  bool
	store.Completion
	// result receives the verdict (store.Written, store.CallerGone or
	// store.Fenced) or an error.
	result chan completionResult
}

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
}

func newCompleter(s *Server, queueSize int, observe func(size int, full bool)) *completer {
	c := &completer{rdb: s.rdb, dialect: s.dialect, maxDeadLetters: s.deadLetterCap(), workerID: s.opts.WorkerID, retention: s.opts.Retention}
	// One flush in flight, as for the client's sends (see NewClient).
	c.coalescer = newCoalescer(1, 256, queueSize, c.flush, observe)
	return c
}

// complete queues one completion and waits for its result.
func (c *completer) complete(comp *completion) completionResult {
	comp.result = make(chan completionResult, 1)
	if err := c.submit(context.Background(), comp); err != nil {
		return completionResult{err: err}
	}
	return <-comp.result
}

// completionGroup is the completions of one queue and kind, written by one
// script call: answers, or the rest.
type completionGroup struct {
	queue    *queue
	fast     bool
	items    []*completion
	answers  *store.Answer
	complete *store.Complete
}

// call returns the group's script call.
func (g *completionGroup) call() *store.Call {
	if g.fast {
		return &g.answers.Call
	}
	return &g.complete.Call
}

// result returns the group's verdicts.
func (g *completionGroup) result() ([]int64, error) {
	if g.fast {
		return g.answers.Result()
	}
	return g.complete.Result()
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
			g = &completionGroup{queue: comp.queue, fast: comp.fast}
			if g.fast {
				g.answers = store.NewAnswer(comp.queue.requests, c.retention, len(batch))
			} else {
				g.complete = store.NewComplete(comp.queue.requests, comp.queue.retries, c.workerID, c.maxDeadLetters, len(batch))
			}
			groups = append(groups, g)
		}
		g.items = append(g.items, comp)
		if g.fast {
			g.answers.Add(comp.Target, comp.EntryID, comp.Response, comp.RecordKey, comp.Record)
		} else {
			g.complete.Add(&comp.Completion)
		}
	}
	calls := make([]*store.Call, len(groups))
	for i, g := range groups {
		calls[i] = g.call()
		calls[i].Use(c.dialect)
	}
	store.Run(ctx, c.rdb, calls...)
	for _, g := range groups {
		results, err := g.result()
		for i, comp := range g.items {
			if err != nil {
				comp.result <- completionResult{err: err}
			} else {
				comp.result <- completionResult{n: results[i]}
			}
		}
	}
}

// groupFor returns the group comp belongs to, nil if there is none yet.
// Batches hold few queues, so a scan beats a map.
func groupFor(groups []*completionGroup, comp *completion) *completionGroup {
	for _, g := range groups {
		if g.queue == comp.queue && g.fast == comp.fast {
			return g
		}
	}
	return nil
}
