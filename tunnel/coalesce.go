package tunnel

import (
	"context"
	"errors"
	"sync"
)

// coalescer hands work items from many goroutines to flushes, each of which
// takes whatever is queued (at least one item, at most maxBatch) and sends
// it as one batch, typically one Redis round trip.
//
// A lone item (nothing queued, a flush slot free) is flushed at once on its
// submitter's goroutine: no timer, and no hand-off to another goroutine,
// which on a lightly loaded machine costs as much as the flush itself.
// Under load, items queue while the flush slots are busy, and flusher
// goroutines send them together in the next batches. At most `flushers`
// flushes run at once, queues are bounded, and no lock is held during a
// flush.
type coalescer[T any] struct {
	items    chan T
	maxBatch int
	flush    func([]T)
	// observe, when not nil, is told each batch's size and whether it was
	// cut at maxBatch (rather than taking all there was).
	observe func(size int, full bool)
	// flushing holds one token per flush in progress, inline or on a
	// flusher goroutine; its capacity bounds concurrent flushes.
	flushing chan struct{}

	// mu orders submits against close: submit holds it shared until its
	// item is queued or has a flush slot, so nothing is queued after the
	// flusher goroutines drained the queue and stopped. It is never held
	// during a flush.
	mu     sync.RWMutex
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

// errBatcherClosed is returned by submit after close.
var errBatcherClosed = errors.New("rpr: closed")

// newCoalescer starts flushers goroutines calling flush; stop them with
// close. observe may be nil.
func newCoalescer[T any](flushers, maxBatch, queueSize int, flush func([]T), observe func(size int, full bool)) *coalescer[T] {
	c := &coalescer[T]{
		items:    make(chan T, queueSize),
		maxBatch: maxBatch,
		flush:    flush,
		observe:  observe,
		flushing: make(chan struct{}, flushers),
		stop:     make(chan struct{}),
	}
	for range flushers {
		c.wg.Add(1)
		go c.flushLoop()
	}
	return c
}

// submit flushes item at once when it is alone, and otherwise queues it
// for the next batch, waiting for room while ctx allows. An inline flush
// has finished (the item's completion has run) when submit returns.
func (c *coalescer[T]) submit(ctx context.Context, item T) error {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return errBatcherClosed
	}
	if len(c.items) == 0 {
		select {
		case c.flushing <- struct{}{}:
			c.mu.RUnlock() // close waits for the slot instead
			c.send([]T{item})
			<-c.flushing
			return nil
		default: // every flush slot busy: queue behind them
		}
	}
	defer c.mu.RUnlock()
	select {
	case c.items <- item: // room: ctx's Done channel, made on demand by some contexts, is not needed
		return nil
	default:
	}
	select {
	case c.items <- item:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// enqueue queues item for the flusher goroutines, never flushing it on
// the caller's goroutine, waiting for room while ctx allows: for callers
// that must not wait out a round trip (a stream's sender keeps queueing
// while its previous batch is in flight).
func (c *coalescer[T]) enqueue(ctx context.Context, item T) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return errBatcherClosed
	}
	select {
	case c.items <- item:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close flushes what is queued and stops the flushers.
func (c *coalescer[T]) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	c.wg.Wait()
	// Flushes on submitters' goroutines end when their slots come back.
	for range cap(c.flushing) {
		c.flushing <- struct{}{}
	}
}

// flushLoop is one flusher goroutine: it takes a flush slot for each batch
// it sends, and once stopped drains the queue and exits.
func (c *coalescer[T]) flushLoop() {
	defer c.wg.Done()
	batch := make([]T, 0, c.maxBatch)
	for {
		select {
		case item := <-c.items:
			c.flushing <- struct{}{}
			batch = c.fill(append(batch[:0], item))
			c.send(batch)
			<-c.flushing
			clear(batch)
		case <-c.stop:
			for {
				batch = c.fill(batch[:0])
				if len(batch) == 0 {
					return
				}
				c.send(batch)
				clear(batch)
			}
		}
	}
}

// send records batch's size and flushes it.
func (c *coalescer[T]) send(batch []T) {
	if c.observe != nil {
		c.observe(len(batch), len(batch) == c.maxBatch)
	}
	c.flush(batch)
}

// fill adds queued items to batch without waiting, up to maxBatch.
func (c *coalescer[T]) fill(batch []T) []T {
	for len(batch) < c.maxBatch {
		select {
		case item := <-c.items:
			batch = append(batch, item)
		default:
			return batch
		}
	}
	return batch
}
