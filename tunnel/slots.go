package tunnel

import (
	"context"
	"time"
)

// Handler slots. A server has Concurrency slots, shared by every queue it
// reads; a request holds one from its read to its completion. Two rules
// keep one queue from taking what the others need:
//
//   - a quiet queue's reader blocks holding one slot (readShare), so idle
//     services cost the busy ones nothing;
//   - a queue holding its fair share or more (fairShare) waits, while
//     another queue's reader has had to wait for a slot in the last
//     contentionWindow, until one of its own slots is given back. Without
//     it a slow service, whose requests hold their slots longest, ends up
//     holding them all: a fast service beside one whose calls take 20 ms
//     did 0.08x its calls/s alone.
//
// When no other reader has had to wait lately, a queue takes any free
// slot: a busy service beside quiet or lightly used ones has them all.

// fairnessRecheck bounds how long a queue over its share waits before it
// looks again whether another reader still waits.
const fairnessRecheck = 10 * time.Millisecond

// contentionWindow is how long after another queue's reader had to wait
// for a slot a queue keeps to its fair share.
const contentionWindow = 100 * time.Millisecond

// contended reports whether a reader of a queue other than q has had to
// wait for a slot within contentionWindow.
func (r *serveRun) contended(q *queue) bool {
	by := r.contendedBy.Load()
	return by != nil && by != q && time.Since(time.Unix(0, r.contendedAt.Load())) < contentionWindow
}

// acquire takes one slot for q, waiting as long as ctx allows; false when
// ctx ended first.
func (r *serveRun) acquire(ctx context.Context, q *queue) bool {
	for {
		if r.contended(q) && q.held.Load() >= int64(r.fairShare()) {
			if !r.yield(ctx, q) {
				return false
			}
			continue
		}
		select {
		case r.slots <- struct{}{}:
			q.held.Add(1)
			return true
		default:
		}
		r.contendedAt.Store(time.Now().UnixNano())
		r.contendedBy.Store(q)
		select {
		case r.slots <- struct{}{}:
			q.held.Add(1)
			return true
		case <-ctx.Done():
			return false
		}
	}
}

// yield waits until q gives a slot back, or a little while; false when
// ctx ended.
func (r *serveRun) yield(ctx context.Context, q *queue) bool {
	t := time.NewTimer(fairnessRecheck)
	defer t.Stop()
	select {
	case <-q.freed:
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	return true
}

// takeSlots takes up to n more free slots for q without waiting, no more
// than its fair share while other queues contend, and returns how many it
// took.
func (r *serveRun) takeSlots(q *queue, n int) int {
	if r.contended(q) {
		n = min(n, max(0, r.fairShare()-int(q.held.Load())))
	}
	for i := range n {
		select {
		case r.slots <- struct{}{}:
			q.held.Add(1)
		default:
			return i
		}
	}
	return n
}

// releaseSlots gives back n of q's slots.
func (r *serveRun) releaseSlots(q *queue, n int) {
	if n <= 0 {
		return
	}
	q.held.Add(int64(-n))
	for range n {
		<-r.slots
	}
	select {
	case q.freed <- struct{}{}:
	default:
	}
}

// readShare is how many slots one queue's read may hold: the batch size,
// but no more than the queue's share of the slots left by the quiet
// queues' readers (which hold one each), so that one busy queue never
// holds the slots another busy queue's requests wait for (a server of two
// services, or of several shards), and quiet ones cost the busy ones
// nothing.
func (r *serveRun) readShare() int {
	return max(1, min(r.server.opts.BatchSize, r.fairShare()))
}

// fairShare is each busy queue's share of the slots the quiet queues'
// readers leave.
func (r *serveRun) fairShare() int {
	queues := int64(max(r.queues.count(), 1))
	quiet := min(r.quietReaders.Load(), queues-1)
	return max(1, (cap(r.slots)-int(quiet))/int(queues-quiet))
}
