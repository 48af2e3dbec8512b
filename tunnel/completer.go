package tunnel

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// completion is one request's outcome waiting to be written (see
// completeScript for the actions).
type completion struct {
	queue  *queue
	req    *received
	action string        // reply, done, retry or dead
	target string        // reply stream, retry set or dead-letter stream
	final  string        // the state to record
	ttl    time.Duration // how long the state keeps the outcome
	resp   []byte        // response envelope kept in the state (and the reply)
	env    []byte        // request envelope to retry or dead-letter
	extra  string        // retry: backoff ms; dead: JSON field/value pairs
	// result receives completeScript's verdict (1 written, 0 caller gone,
	// -1 fenced) or an error.
	result chan completionResult
}

type completionResult struct {
	n   int64
	err error
}

// completer writes completions in batches: whatever is queued when a
// flusher is free goes out as one completeScript call per queue (a lane of a service shard), all in
// one pipeline. Under load that is one script run for dozens of requests.
type completer struct {
	*coalescer[*completion]
	rdb      redis.UniversalClient
	workerID string
}

func newCompleter(rdb redis.UniversalClient, workerID string, queueSize int, observe func(size int, full bool)) *completer {
	c := &completer{rdb: rdb, workerID: workerID}
	c.coalescer = newCoalescer(2, 256, queueSize, c.flush, observe)
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

// flush writes batch, one script call per queue.
func (c *completer) flush(batch []*completion) {
	// The answers must be written whatever happens to the callers, so the
	// calls run on their own context.
	ctx := context.Background()
	type group struct {
		items []*completion
		call  *scriptCall
		cmd   *redis.Cmd
	}
	var groups []*group
	byQueue := map[*queue]*group{}
	for _, comp := range batch {
		g := byQueue[comp.queue]
		if g == nil {
			g = &group{call: &scriptCall{
				script: completeScript,
				keys:   []string{comp.queue.requests},
				args:   []any{workersGroup, c.workerID},
			}}
			byQueue[comp.queue] = g
			groups = append(groups, g)
		}
		g.items = append(g.items, comp)
		target := comp.target
		if target == "" {
			target = comp.req.state // any key of the shard; not written
		}
		g.call.keys = append(g.call.keys, target, comp.req.state)
		g.call.args = append(g.call.args, comp.req.entryID, comp.action, comp.final,
			max(comp.ttl, time.Millisecond).Milliseconds(), comp.resp, comp.env, comp.extra)
	}
	pipe := c.rdb.Pipeline()
	for _, g := range groups {
		g.cmd = g.call.script.EvalSha(ctx, pipe, g.call.keys, g.call.args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for _, g := range groups {
		if isNoScript(g.cmd.Err()) {
			g.cmd = g.call.script.Eval(ctx, c.rdb, g.call.keys, g.call.args...)
		}
		results, err := g.cmd.Int64Slice()
		if err == nil && len(results) != len(g.items) {
			err = fmt.Errorf("complete script answered %d results for %d requests", len(results), len(g.items))
		}
		for i, comp := range g.items {
			if err != nil {
				comp.result <- completionResult{err: err}
			} else {
				comp.result <- completionResult{n: results[i]}
			}
		}
	}
}
