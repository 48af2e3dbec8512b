package tunnel

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// handlerContext builds a context as handle does: a cancelCtx over a
// deadlineContext started on t.
func handlerContext(t *deadlineTimer, dc *deadlineContext, deadline time.Time) (context.Context, context.CancelCauseFunc) {
	t.startHidden(dc, deadline, time.Now())
	return context.WithCancelCause(dc)
}

// TestHiddenDeadlineContextReusesOnlyOpenChannels: a handler's parent
// released before its deadline gives its Done channel, never closed, to
// the next one; one that reached its deadline closed its channel, which
// is not given again.
func TestHiddenDeadlineContextReusesOnlyOpenChannels(t *testing.T) {
	var timer deadlineTimer
	var first, second, third deadlineContext
	ctx, cancel := handlerContext(&timer, &first, time.Now().Add(time.Hour))
	cancel(errors.New("call over"))
	timer.release(&first)
	if ctx.Err() == nil || first.Err() != context.Canceled {
		t.Fatalf("after release: handler Err %v, parent Err %v; want both ended, the parent Canceled", ctx.Err(), first.Err())
	}
	select {
	case <-first.done:
		t.Fatal("a released hidden context closed its Done channel; want it kept open for reuse")
	default:
	}
	ctx, cancel = handlerContext(&timer, &second, time.Now().Add(20*time.Millisecond))
	defer cancel(nil)
	if second.done != first.done {
		t.Fatal("the next hidden context made a new Done channel; want the released one's")
	}
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("handler Err at its deadline %v; want DeadlineExceeded", ctx.Err())
	}
	<-second.Done() // closed at the deadline
	timer.release(&second)
	_, cancel3 := handlerContext(&timer, &third, time.Now().Add(time.Hour))
	defer cancel3(nil)
	defer timer.release(&third)
	if third.done == second.done {
		t.Fatal("a closed Done channel was given to the next context")
	}
}

func TestDeadlineContextEndsLikeWithDeadline(t *testing.T) {
	var timer deadlineTimer
	var dc deadlineContext
	deadline := time.Now().Add(50 * time.Millisecond)
	ctx, cancel := handlerContext(&timer, &dc, deadline)
	defer cancel(nil)
	child, cancelChild := context.WithTimeout(ctx, time.Hour)
	defer cancelChild()

	if d, ok := ctx.Deadline(); !ok || !d.Equal(deadline) {
		t.Fatalf("Deadline() = %v, %v; want %v, true", d, ok, deadline)
	}
	if d, _ := child.Deadline(); !d.Equal(deadline) {
		t.Fatalf("child's Deadline() = %v; want the parent's %v", d, deadline)
	}
	<-child.Done()
	if now := time.Now(); now.Before(deadline) {
		t.Fatalf("done at %v, before the deadline %v", now, deadline)
	}
	for name, c := range map[string]context.Context{"handler": ctx, "child": child} {
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Errorf("%s context: Err() = %v; want DeadlineExceeded", name, c.Err())
		}
		if !errors.Is(context.Cause(c), context.DeadlineExceeded) {
			t.Errorf("%s context: Cause = %v; want DeadlineExceeded", name, context.Cause(c))
		}
	}
}

func TestDeadlineContextKeepsACancelsCause(t *testing.T) {
	var timer deadlineTimer
	var dc deadlineContext
	ctx, cancel := handlerContext(&timer, &dc, time.Now().Add(20*time.Millisecond))
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	cause := errors.New("lease lost")
	cancel(cause)
	timer.release(&dc)
	<-child.Done()
	if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), cause) || !errors.Is(context.Cause(child), cause) {
		t.Fatalf("Err %v, Cause %v, child's Cause %v; want Canceled and %v", ctx.Err(), context.Cause(ctx), context.Cause(child), cause)
	}

	// The release took it out of the heap; the timer, still set for its
	// deadline, finds nothing due then and must set itself again for a
	// later deadline.
	if n := heapLen(&timer); n != 0 {
		t.Fatalf("%d contexts in the heap after the release; want none", n)
	}
	var later deadlineContext
	laterCtx, cancelLater := handlerContext(&timer, &later, time.Now().Add(40*time.Millisecond))
	defer cancelLater(nil)
	select {
	case <-laterCtx.Done():
	case <-time.After(30 * time.Second): // a bound on the wait, not a timing check
		t.Fatal("a deadline after a released one never fired: the timer did not set itself again")
	}
	if !errors.Is(laterCtx.Err(), context.DeadlineExceeded) || !errors.Is(dc.Err(), context.Canceled) {
		t.Fatalf("later context: Err() = %v; released one: %v; want DeadlineExceeded and Canceled", laterCtx.Err(), dc.Err())
	}
}

// heapLen is how many contexts t's heap holds.
func heapLen(t *deadlineTimer) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.heap)
}

func TestDeadlineTimerFiresEachInOrderAndSkipsReleased(t *testing.T) {
	var timer deadlineTimer
	const n = 200
	contexts := make([]deadlineContext, n)
	handlers := make([]context.Context, n)
	deadlines := make([]time.Time, n)
	start := time.Now()
	for i := range n {
		// Deadlines out of start order, so the timer must move earlier.
		deadlines[i] = start.Add(time.Duration(10+(i*37)%100) * time.Millisecond)
		var cancel context.CancelCauseFunc
		handlers[i], cancel = handlerContext(&timer, &contexts[i], deadlines[i])
		defer cancel(nil)
	}
	released := make([]context.Context, 0, n/4)
	for i := 0; i < n; i += 4 {
		// A child of the released context, made before the release, sees
		// it end as a cancel, not at the deadline.
		child, cancel := context.WithCancel(&contexts[i])
		defer cancel()
		released = append(released, child)
		timer.release(&contexts[i])
	}
	if got, want := heapLen(&timer), n-n/4; got != want {
		t.Fatalf("%d contexts in the heap after releasing %d of %d; want %d", got, n/4, n, want)
	}
	for i := range n {
		if i%4 == 0 {
			continue
		}
		<-handlers[i].Done()
		if now := time.Now(); now.Before(deadlines[i]) {
			t.Fatalf("context %d done at %v, before its deadline %v", i, now, deadlines[i])
		}
		if !errors.Is(handlers[i].Err(), context.DeadlineExceeded) {
			t.Fatalf("context %d: Err() = %v; want DeadlineExceeded", i, handlers[i].Err())
		}
	}
	for i, child := range released {
		if err := child.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("child of released context %d: Err() = %v; want Canceled", 4*i, err)
		}
	}
	if left := heapLen(&timer); left != 0 {
		t.Fatalf("%d contexts left in the heap; want none", left)
	}
}

func TestDeadlineContextPastDeadlineIsDoneAtOnce(t *testing.T) {
	var timer deadlineTimer
	var dc deadlineContext
	ctx, cancel := handlerContext(&timer, &dc, time.Now().Add(-time.Second))
	defer cancel(nil)
	select {
	case <-ctx.Done():
	default:
		t.Fatal("a context whose deadline has passed is not done")
	}
	if left := heapLen(&timer); !errors.Is(context.Cause(ctx), context.DeadlineExceeded) || left != 0 {
		t.Fatalf("Cause %v, %d in the heap; want DeadlineExceeded and none", context.Cause(ctx), left)
	}
	timer.release(&dc) // harmless
}

func TestDeadlineContextsStartNoGoroutines(t *testing.T) {
	var timer deadlineTimer
	before := runtime.NumGoroutine()
	const n = 500
	contexts := make([]deadlineContext, n)
	cancels := make([]context.CancelCauseFunc, n)
	for i := range n {
		_, cancels[i] = handlerContext(&timer, &contexts[i], time.Now().Add(time.Hour))
	}
	if grown := runtime.NumGoroutine() - before; grown > n/10 {
		t.Fatalf("%d handler contexts started %d goroutines; want none per context", n, grown)
	}
	for i := range n {
		cancels[i](nil)
		timer.release(&contexts[i])
	}
	if left := heapLen(&timer); left != 0 {
		t.Fatalf("%d contexts left in the heap after release; want none", left)
	}
}

func TestDeadlineContextEndsWithItsParent(t *testing.T) {
	type key struct{}
	var timer deadlineTimer
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "caller's"))
	var dc deadlineContext
	timer.start(&dc, parent, time.Now().Add(time.Hour), time.Now())
	defer timer.release(&dc)
	if got := dc.Value(key{}); got != "caller's" {
		t.Fatalf("Value = %v; want the parent's value", got)
	}
	child, cancelChild := context.WithCancel(&dc)
	defer cancelChild()
	cancelParent()
	<-child.Done()
	if !errors.Is(dc.Err(), context.Canceled) || !errors.Is(child.Err(), context.Canceled) {
		t.Fatalf("Err %v, child's %v; want Canceled, the parent's", dc.Err(), child.Err())
	}
	if left := heapLen(&timer); left != 0 {
		t.Fatalf("%d contexts left in the heap after the parent ended; want none", left)
	}

	// A parent that has ended already ends the context at once.
	var ended deadlineContext
	timer.start(&ended, parent, time.Now().Add(time.Hour), time.Now())
	defer timer.release(&ended)
	if !errors.Is(ended.Err(), context.Canceled) {
		t.Fatalf("started under an ended parent: Err() = %v; want Canceled", ended.Err())
	}
}

func TestDeadlineContextUnderAParentFiresAtItsOwnDeadline(t *testing.T) {
	var timer deadlineTimer
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	var dc deadlineContext
	deadline := time.Now().Add(30 * time.Millisecond)
	timer.start(&dc, parent, deadline, time.Now())
	<-dc.Done()
	if !errors.Is(dc.Err(), context.DeadlineExceeded) || time.Now().Before(deadline) {
		t.Fatalf("Err() = %v at %v; want DeadlineExceeded, not before %v", dc.Err(), time.Now(), deadline)
	}
	timer.release(&dc) // after the deadline: keeps DeadlineExceeded
	if !errors.Is(dc.Err(), context.DeadlineExceeded) {
		t.Fatalf("after release: Err() = %v; want DeadlineExceeded still", dc.Err())
	}
	if parent.Err() != nil {
		t.Fatalf("the parent ended with its child: %v", parent.Err())
	}
}

func TestDeadlineHeapKeepsOrderThroughRemovals(t *testing.T) {
	var h deadlineHeap
	base := time.Now()
	contexts := make([]deadlineContext, 300)
	for i := range contexts {
		contexts[i] = deadlineContext{deadline: base.Add(time.Duration((i*7919)%1000) * time.Millisecond), index: -1}
		h.push(&contexts[i])
	}
	for i := 0; i < len(contexts); i += 3 { // removals from anywhere in the heap
		h.remove(contexts[i].index)
	}
	for i, c := range h {
		if c.index != i {
			t.Fatalf("context at %d says index %d", i, c.index)
		}
	}
	var last time.Time
	for n := 0; len(h) > 0; n++ {
		c := h.popMin()
		if c.deadline.Before(last) {
			t.Fatalf("pop %d: deadline %v before the previous %v", n, c.deadline, last)
		}
		last = c.deadline
	}
	for i := range contexts {
		if contexts[i].index != -1 {
			t.Fatalf("context %d still has index %d after leaving the heap", i, contexts[i].index)
		}
	}
}
