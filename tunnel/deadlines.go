package tunnel

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Per-call deadlines without a runtime timer per call.
//
// context.WithDeadline costs a runtime timer and four allocations per
// call; a server's requests all start from context.Background, a client's
// calls often from a context that never ends, and most end long before
// their deadline. A deadlineTimer keeps their deadlines in one heap behind
// one timer instead.
//
// A handler's context is a cancelCtx (context.WithCancelCause, for the
// causes the server cancels with) whose parent is a deadlineContext: when
// the deadline passes, the context package cancels the child with the
// parent's error, DeadlineExceeded, so the handler, its context's children
// and context.Cause all see DeadlineExceeded, as under
// context.WithDeadline. A unary call that needs a deadline of its own
// runs on a deadlineContext over the caller's context.

// deadlineContext is a context done at its deadline, when its parent is
// done or when released, whichever comes first, with its parent's values.
// It implements the AfterFunc method the context package uses to hear of
// its end without a goroutine per child.
type deadlineContext struct {
	parent   context.Context // nil for none
	deadline time.Time
	// stopParent unregisters the end of c from its parent's, when the
	// parent can end.
	stopParent func() bool

	mu sync.Mutex
	// done is made when first asked for (Done), unless c is hidden: a
	// unary call waits through its waiter instead, and most calls never
	// need the channel.
	done    chan struct{}
	err     error // set when c ends
	after   []func()
	afterAt [1]func() // after's room for the one child a handler context has
	// waiter, when set, is woken when c ends: the unary call waiting on
	// c, through the one channel its outcome also arrives on.
	waiter *callWaiter

	index int // in its deadlineTimer's heap; -1 when not in it
	// hidden marks the parent of a handler's context (see
	// deadlineTimer.startHidden): nothing but the context package reads
	// its Done, so its channel outlives it unless it closed.
	hidden bool
}

var _ context.Context = (*deadlineContext)(nil)

func (c *deadlineContext) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *deadlineContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		}
	}
	return c.done
}

// wakeOnEnd has w woken (callWaiter.wake) when c ends, and reports true,
// unless c has ended already; w nil stops it, and once it returns no end
// of c touches w again (c wakes w holding c.mu), so w's memory may be
// reused.
func (c *deadlineContext) wakeOnEnd(w *callWaiter) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false
	}
	c.waiter = w
	return true
}

func (c *deadlineContext) Value(key any) any {
	if c.parent == nil {
		return nil
	}
	return c.parent.Value(key)
}

func (c *deadlineContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *deadlineContext) String() string {
	parent := "context.Background"
	if c.parent != nil {
		parent = fmt.Sprint(c.parent)
	}
	return parent + ".WithDeadline(" + c.deadline.String() + ")"
}

// AfterFunc arranges for f to run once c ends, on the goroutine that ends
// it (the context package passes only a child's cancel, which does not
// block); stop unregisters f and reports whether it did.
func (c *deadlineContext) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	i := len(c.after)
	c.after = append(c.after, f)
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.err != nil || i >= len(c.after) || c.after[i] == nil {
			return false
		}
		c.after[i] = nil
		return true
	}
}

// end ends c with err: its Done closes, its waiter wakes and its
// registered funcs run.
func (c *deadlineContext) end(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	after := c.after
	c.after = nil
	if c.done != nil {
		close(c.done)
	}
	if c.waiter != nil {
		c.waiter.wake() // never blocks: a waiter is signalled once, into room for one
		c.waiter = nil
	}
	c.mu.Unlock()
	for _, f := range after {
		if f != nil {
			f()
		}
	}
}

// retire ends a hidden c with context.Canceled without closing its Done
// channel, and returns that channel for reuse: nil when c had ended
// already (the channel is closed) or when something still waits for its
// end (the channel is closed then, as end does). Its handler's context
// has unregistered from c before the call is released.
func (c *deadlineContext) retire() chan struct{} {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil
	}
	for _, f := range c.after {
		if f != nil {
			c.mu.Unlock()
			c.end(context.Canceled)
			return nil
		}
	}
	c.err = context.Canceled
	c.after = nil
	c.mu.Unlock()
	return c.done
}

// deadlineTimer fires the deadlines of deadlineContexts from one runtime
// timer, set for the earliest deadline it holds (or later: see fire).
type deadlineTimer struct {
	mu    sync.Mutex
	heap  deadlineHeap
	timer *time.Timer
	armed time.Time // when timer fires; zero when it is not set
	// spare are Done channels of hidden contexts released before they
	// ended, never closed, for the next ones (see startHidden).
	spare []chan struct{}
}

// start makes c a child of parent (nil for none) done at deadline and,
// unless that has passed at now, puts it in t's heap. The caller must release it
// when the call ends, as it would call a CancelFunc.
func (t *deadlineTimer) start(c *deadlineContext, parent context.Context, deadline, now time.Time) {
	t.begin(c, parent, deadline, now, false)
}

// startHidden starts c, done at deadline, as the parent of a handler's
// context alone: a context that only the context package's
// WithCancelCause sees, which reads its Done once, without waiting,
// and hears of its end through AfterFunc. Such a context's Done channel,
// when it has not closed, goes back to t on release for the next one: a
// channel per request was 112 of the 1,850 bytes a busy server allocated
// per call, and bytes allocated are what sets how often it collects.
func (t *deadlineTimer) startHidden(c *deadlineContext, deadline, now time.Time) {
	t.begin(c, nil, deadline, now, true)
}

// begin starts c (see start and startHidden); now is the time the
// caller read last, which saves reading the clock again.
func (t *deadlineTimer) begin(c *deadlineContext, parent context.Context, deadline, now time.Time, hidden bool) {
	*c = deadlineContext{parent: parent, deadline: deadline, index: -1, hidden: hidden}
	c.after = c.afterAt[:0]
	cancelable := parent != nil && parent.Done() != nil
	if cancelable && parent.Err() != nil {
		c.end(parent.Err())
		return
	}
	if !now.Before(deadline) {
		c.end(context.DeadlineExceeded)
		return
	}
	t.mu.Lock()
	if hidden {
		if n := len(t.spare); n > 0 {
			c.done = t.spare[n-1]
			t.spare[n-1] = nil
			t.spare = t.spare[:n-1]
		} else {
			c.done = make(chan struct{})
		}
	}
	t.heap.push(c)
	// The timer moves only earlier: a deadline released before it
	// passes leaves the timer where it was, and fire sets it again.
	if t.armed.IsZero() || deadline.Before(t.armed) {
		t.arm(deadline)
	}
	t.mu.Unlock()
	if cancelable {
		c.stopParent = context.AfterFunc(parent, func() { t.endEarly(c, parent.Err()) })
	}
}

// release ends c with context.Canceled, as a CancelFunc would, unless it
// has ended already: its call is over. A hidden c's open channel goes to
// t.spare in the same hold of t's lock that takes c out of the heap.
func (t *deadlineTimer) release(c *deadlineContext) {
	if c.stopParent != nil {
		c.stopParent()
	}
	if !c.hidden {
		t.endEarly(c, context.Canceled)
		return
	}
	// Retired first: should the timer take c meanwhile, c has ended and
	// the timer's end leaves the channel open.
	done := c.retire()
	t.mu.Lock()
	if c.index >= 0 {
		t.heap.remove(c.index)
	}
	if done != nil && len(t.spare) < maxSpareDone {
		t.spare = append(t.spare, done)
	}
	t.mu.Unlock()
}

// maxSpareDone bounds the Done channels a deadlineTimer keeps for reuse.
const maxSpareDone = 4096

// endEarly takes c out of t's heap and ends it with err, unless it has
// ended already.
func (t *deadlineTimer) endEarly(c *deadlineContext, err error) {
	t.mu.Lock()
	if c.index >= 0 {
		t.heap.remove(c.index)
	}
	t.mu.Unlock()
	c.end(err)
}

// arm sets the timer for at; t.mu is held.
func (t *deadlineTimer) arm(at time.Time) {
	t.armed = at
	wait := time.Until(at)
	if t.timer == nil {
		t.timer = time.AfterFunc(wait, t.fire)
		return
	}
	t.timer.Reset(wait)
}

// fire expires every context whose deadline has passed and sets the timer
// for the earliest one left.
func (t *deadlineTimer) fire() {
	now := time.Now()
	var due []*deadlineContext
	t.mu.Lock()
	for len(t.heap) > 0 && !now.Before(t.heap[0].deadline) {
		due = append(due, t.heap.popMin())
	}
	t.armed = time.Time{}
	if len(t.heap) > 0 {
		t.arm(t.heap[0].deadline)
	}
	t.mu.Unlock()
	for _, c := range due {
		c.end(context.DeadlineExceeded)
	}
}

// deadlineHeap is a binary min-heap of contexts by deadline, each
// knowing its index. It is written out rather than used through
// container/heap, whose calls through an interface were most of the cost
// of releasing a context.
type deadlineHeap []*deadlineContext

func (h *deadlineHeap) push(c *deadlineContext) {
	c.index = len(*h)
	*h = append(*h, c)
	h.up(c.index)
}

// popMin takes the context with the earliest deadline out of h.
func (h *deadlineHeap) popMin() *deadlineContext {
	c := (*h)[0]
	h.remove(0)
	return c
}

// remove takes the context at index i out of h.
func (h *deadlineHeap) remove(i int) {
	old := *h
	last := len(old) - 1
	removed := old[i]
	if i != last {
		h.swap(i, last)
	}
	old[last] = nil
	*h = old[:last]
	removed.index = -1
	if i != last {
		h.down(i)
		h.up(i)
	}
}

func (h deadlineHeap) less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }

func (h deadlineHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h deadlineHeap) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

func (h deadlineHeap) down(i int) {
	for {
		least := i
		if l := 2*i + 1; l < len(h) && h.less(l, least) {
			least = l
		}
		if r := 2*i + 2; r < len(h) && h.less(r, least) {
			least = r
		}
		if least == i {
			return
		}
		h.swap(i, least)
		i = least
	}
}
