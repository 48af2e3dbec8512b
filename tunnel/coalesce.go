package tunnel

import (
	"context"
	"errors"
	"sync"
)

// coalescer hands work items from many goroutines to a few flusher
// goroutines, each of which takes whatever is queued (at least one item, at
// most maxBatch) and flushes it as one batch, typically one Redis round
// trip. A lone item leaves at once, with no timer; under load, items that
// arrive while a batch is in flight go out together in the next. Queues
// are bounded and no lock is held during a flush.
type coalescer[T any] struct {
	items    chan T
	maxBatch int
	flush    func([]T)
	// observe, when not nil, is told each batch's size and whether it was
	// cut at maxBatch (rather than taking all there was).
	observe  func(size int, full bool)
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// errBatcherClosed is returned by submit after close.
var errBatcherClosed = errors.New("rpr: closed")

// newCoalescer starts flushers goroutines calling flush; stop them with
// close. observe may be nil.
func newCoalescer[T any](flushers, maxBatch, queueSize int, flush func([]T), observe func(size int, full bool)) *coalescer[T] {
	c := &coalescer[T]{items: make(chan T, queueSize), maxBatch: maxBatch, flush: flush, observe: observe, stop: make(chan struct{})}
	for range flushers {
		c.wg.Add(1)
		go c.flushLoop()
	}
	return c
}

// submit queues item, waiting for room while ctx allows.
func (c *coalescer[T]) submit(ctx context.Context, item T) error {
	select {
	case <-c.stop:
		return errBatcherClosed
	default:
	}
	select {
	case c.items <- item:
		return nil
	case <-c.stop:
		return errBatcherClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close flushes what is queued and stops the flushers.
func (c *coalescer[T]) close() {
	c.stopOnce.Do(func() { close(c.stop) })
	c.wg.Wait()
}

func (c *coalescer[T]) flushLoop() {
	defer c.wg.Done()
	batch := make([]T, 0, c.maxBatch)
	for {
		select {
		case item := <-c.items:
			batch = c.fill(append(batch[:0], item))
			if c.observe != nil {
				c.observe(len(batch), len(batch) == c.maxBatch)
			}
			c.flush(batch)
			clear(batch)
		case <-c.stop:
			// flush what is left, then exit
			for {
				batch = c.fill(batch[:0])
				if len(batch) == 0 {
					return
				}
				c.flush(batch)
				clear(batch)
			}
		}
	}
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
