package tunnel

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// actionAnswer is the completion of a unary request on the fast path
// (answerScript); the other actions are completeScript's.
const actionAnswer = "answer"

// completion is one request's outcome waiting to be written (see
// answerScript and completeScript for the actions).
type completion struct {
	queue  *queue
	req    *received
	action string        // answer, reply, done, retry or dead
	target string        // reply stream, retry set or dead-letter stream
	final  string        // the state to record
	ttl    time.Duration // how long the state keeps the outcome
	resp   []byte        // response envelope kept in the state (and the reply)
	env    []byte        // request envelope to retry or dead-letter
	extra  string        // retry: backoff ms; dead: JSON field/value pairs
	// result receives the script's verdict (1 written, 0 caller gone, -1
	// fenced) or an error.
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
}

func newCompleter(rdb redis.UniversalClient, workerID string, queueSize int, observe func(size int, full bool)) *completer {
	c := &completer{rdb: rdb, workerID: workerID}
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
// script call.
type completionGroup struct {
	queue  *queue
	answer bool // answerScript; else completeScript
	items  []*completion
	call   scriptCall
	cmd    *redis.Cmd
}

// add appends comp to the group's script call.
func (g *completionGroup) add(comp *completion) {
	g.items = append(g.items, comp)
	if g.answer {
		g.call.keys = append(g.call.keys, comp.target)
		g.call.args = append(g.call.args, comp.req.entryID, comp.resp)
		return
	}
	target := comp.target
	if target == "" {
		target = comp.req.state // any key of the shard; not written
	}
	g.call.keys = append(g.call.keys, target, comp.req.state)
	g.call.args = append(g.call.args, comp.req.entryID, comp.action, comp.final,
		max(comp.ttl, time.Millisecond).Milliseconds(), comp.resp, comp.env, comp.extra)
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
			g = &completionGroup{queue: comp.queue, answer: comp.action == actionAnswer}
			g.call.keys = append(make([]string, 0, 1+2*len(batch)), comp.queue.requests)
			g.call.args = []any{workersGroup}
			g.call.script = answerScript
			if !g.answer {
				g.call.script = completeScript
				g.call.args = append(g.call.args, c.workerID)
			}
			groups = append(groups, g)
		}
		g.add(comp)
	}
	if len(groups) == 1 {
		// One script call needs no pipeline.
		groups[0].cmd = groups[0].call.script.EvalSha(ctx, c.rdb, groups[0].call.keys, groups[0].call.args...)
	} else {
		pipe := c.rdb.Pipeline()
		for _, g := range groups {
			g.cmd = g.call.script.EvalSha(ctx, pipe, g.call.keys, g.call.args...)
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
	}
	for _, g := range groups {
		if isNoScript(g.cmd.Err()) {
			g.cmd = g.call.script.Eval(ctx, c.rdb, g.call.keys, g.call.args...)
		}
		results, err := g.cmd.Int64Slice()
		if err == nil && len(results) != len(g.items) {
			err = fmt.Errorf("completion script answered %d results for %d requests", len(results), len(g.items))
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

// groupFor returns the group comp belongs to, nil if there is none yet.
// Batches hold few queues, so a scan beats a map.
func groupFor(groups []*completionGroup, comp *completion) *completionGroup {
	answer := comp.action == actionAnswer
	for _, g := range groups {
		if g.queue == comp.queue && g.answer == answer {
			return g
		}
	}
	return nil
}
