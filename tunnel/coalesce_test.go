package tunnel

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestCoalescerFlushesALoneItemOnItsSubmitter checks the no-hand-off path:
// an item submitted while nothing is queued and a flush slot is free is
// flushed, alone, before submit returns.
func TestCoalescerFlushesALoneItemOnItsSubmitter(t *testing.T) {
	var mu sync.Mutex
	var batches [][]int
	c := newCoalescer(2, 8, 16, func(batch []int) {
		mu.Lock()
		batches = append(batches, append([]int(nil), batch...))
		mu.Unlock()
	}, nil)
	defer c.close()
	for i := range 3 {
		if err := c.submit(context.Background(), i); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := len(batches)
		mu.Unlock()
		if got != i+1 {
			t.Fatalf("after submit %d returned, %d batches were flushed; want %d (a lone item is flushed before submit returns)", i, got, i+1)
		}
	}
	for i, b := range batches {
		if len(b) != 1 || b[0] != i {
			t.Errorf("batch %d = %v, want [%d]", i, b, i)
		}
	}
}

// TestCoalescerBatchesWhileFlushesAreBusy checks that items submitted while
// every flush slot is busy queue and leave together, never more than
// maxBatch at once and never more flushes at once than slots, and that
// every item is flushed exactly once.
func TestCoalescerBatchesWhileFlushesAreBusy(t *testing.T) {
	const flushers, maxBatch, items = 2, 4, 40
	release := make(chan struct{})
	var mu sync.Mutex
	seen := map[int]int{}
	var sizes []int
	var running, maxRunning int
	c := newCoalescer(flushers, maxBatch, items, func(batch []int) {
		mu.Lock()
		running++
		maxRunning = max(maxRunning, running)
		sizes = append(sizes, len(batch))
		for _, v := range batch {
			seen[v]++
		}
		mu.Unlock()
		<-release
		mu.Lock()
		running--
		mu.Unlock()
	}, nil)

	// Occupy both flush slots with lone items, flushed inline.
	var inline sync.WaitGroup
	for i := range flushers {
		inline.Go(func() { _ = c.submit(context.Background(), i) })
	}
	waitUntil(t, func() bool { mu.Lock(); defer mu.Unlock(); return running == flushers })
	// These queue behind them.
	for i := flushers; i < items; i++ {
		if err := c.submit(context.Background(), i); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	inline.Wait()
	c.close()

	mu.Lock()
	defer mu.Unlock()
	if maxRunning > flushers {
		t.Errorf("%d flushes ran at once; the limit is %d", maxRunning, flushers)
	}
	for i := range items {
		if seen[i] != 1 {
			t.Errorf("item %d flushed %d times, want 1", i, seen[i])
		}
	}
	batched := false
	for _, n := range sizes {
		if n > maxBatch {
			t.Errorf("a batch of %d items; maxBatch is %d", n, maxBatch)
		}
		batched = batched || n > 1
	}
	if !batched {
		t.Errorf("batch sizes %v: items queued behind busy flushes should leave together", sizes)
	}
}

// TestCoalescerQueueIsBounded checks that submit waits for room in a full
// queue only as long as its context allows, and fails after close.
func TestCoalescerQueueIsBounded(t *testing.T) {
	release := make(chan struct{})
	c := newCoalescer(1, 1, 1, func([]int) { <-release }, nil)
	go func() { _ = c.submit(context.Background(), 0) }() // holds the only flush slot
	waitUntil(t, func() bool { return len(c.flushing) == 1 })
	// The flusher goroutine takes one item and waits for the slot; the
	// next fills the queue.
	for i := 1; i <= 2; i++ {
		if err := c.submit(context.Background(), i); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := c.submit(ctx, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("submit to a full queue = %v, want the context's error", err)
	}
	close(release)
	c.close()
	if err := c.submit(context.Background(), 4); !errors.Is(err, errBatcherClosed) {
		t.Fatalf("submit after close = %v, want errBatcherClosed", err)
	}
}

// waitUntil polls cond for up to 10 seconds.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
	}
}

// TestCoalescerCloseWaitsForInlineFlushes checks that close returns only
// once a flush running on a submitter's goroutine has finished.
func TestCoalescerCloseWaitsForInlineFlushes(t *testing.T) {
	release := make(chan struct{})
	var flushed sync.WaitGroup
	flushed.Add(1)
	c := newCoalescer(1, 4, 4, func([]int) { <-release; flushed.Done() }, nil)
	go func() { _ = c.submit(context.Background(), 1) }()
	waitUntil(t, func() bool { return len(c.flushing) == 1 })
	closed := make(chan struct{})
	go func() { c.close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("close returned while a flush was running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-closed
	flushed.Wait()
}
