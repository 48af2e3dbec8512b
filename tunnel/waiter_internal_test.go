package tunnel

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestCallWaiterSignalsOnce: an outcome delivered while the call's context
// ends signals the call's channel exactly once, whichever wins; the loser
// learns it lost (deliver reports false, for its caller to dispose of the
// outcome), and the channel is left empty for reuse.
func TestCallWaiterSignalsOnce(t *testing.T) {
	var delivered, woken int
	for range 2000 {
		w := &callWaiter{done: make(chan struct{}, 2)} // room for a second signal, which must not come
		var deliverWon bool
		var wg sync.WaitGroup
		wg.Go(func() { deliverWon = w.deliver(callResult{err: context.Canceled}) })
		wg.Go(w.wake)
		wg.Wait()
		<-w.done
		select {
		case <-w.done:
			t.Fatal("the waiter's channel was signalled twice")
		default:
		}
		if w.delivered() != deliverWon {
			t.Fatalf("delivered() = %t, but deliver reported %t", w.delivered(), deliverWon)
		}
		if deliverWon {
			delivered++
		} else {
			woken++
		}
	}
	t.Logf("%d delivered first, %d woken first", delivered, woken)
}

// TestAwaitOutcomeWakesAtOwnDeadline: a call waiting on its own deadline
// context is woken when the deadline passes, without the context's Done
// channel being made, and a late outcome is refused rather than left in
// the channel.
func TestAwaitOutcomeWakesAtOwnDeadline(t *testing.T) {
	var timer deadlineTimer
	c := &Client{}
	var own deadlineContext
	now := time.Now()
	timer.start(&own, context.Background(), now.Add(20*time.Millisecond), now)
	defer timer.release(&own)
	w := &callWaiter{done: c.signals.get()}
	if c.awaitOutcome(&own, w) {
		t.Fatal("awaitOutcome reported an outcome; none was delivered")
	}
	if own.Err() != context.DeadlineExceeded {
		t.Fatalf("own.Err() = %v; want DeadlineExceeded", own.Err())
	}
	own.mu.Lock()
	made := own.done != nil
	own.mu.Unlock()
	if made {
		t.Error("the call's own deadline context made a Done channel nobody asked for")
	}
	if w.deliver(callResult{}) {
		t.Error("an outcome was delivered to a call that had stopped waiting")
	}
}

// TestAwaitOutcomeUnderForeignContext: under a context that is not the
// call's own, the wait ends with the context, and an outcome that came
// first wins.
func TestAwaitOutcomeUnderForeignContext(t *testing.T) {
	c := &Client{}
	ctx, cancel := context.WithCancel(context.Background())
	w := &callWaiter{done: c.signals.get()}
	go cancel()
	if c.awaitOutcome(ctx, w) {
		t.Fatal("awaitOutcome reported an outcome; none was delivered")
	}
	w = &callWaiter{done: c.signals.get()}
	if !w.deliver(callResult{}) {
		t.Fatal("deliver to an open waiter failed")
	}
	if !c.awaitOutcome(ctx, w) { // ctx has ended too: the outcome still wins
		t.Fatal("awaitOutcome lost an outcome delivered before the wait")
	}
}
