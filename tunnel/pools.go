package tunnel

import "sync"

// Pools of what a call or request needs only while it runs, reused rather
// than allocated per call: at rpr's call rates the garbage collector's
// share of a process's CPU follows the bytes allocated.

// objectPool holds values of T that nothing keeps once their call or
// request is over. get returns one as new(T) would (zero), put empties
// it first, so that a pooled value keeps nothing of its last use alive.
type objectPool[T any] struct{ pool sync.Pool }

func (p *objectPool[T]) get() *T {
	if v, ok := p.pool.Get().(*T); ok {
		return v
	}
	return new(T)
}

// put empties v and keeps it for reuse; v must not be used after.
func (p *objectPool[T]) put(v *T) {
	var zero T
	*v = zero
	p.pool.Put(v)
}

// signalPool holds channels of one buffered signal each, for waits that
// end with exactly one send (a completion written, an answer delivered):
// a channel its waiter received from is empty again and goes back; one
// whose waiter stopped waiting may still get its send, and is left to
// the collector. Reusing them spares a channel per call or request.
type signalPool struct{ pool sync.Pool }

func (p *signalPool) get() chan struct{} {
	if ch, ok := p.pool.Get().(chan struct{}); ok {
		return ch
	}
	return make(chan struct{}, 1)
}

// put keeps ch, which must be empty, for reuse.
func (p *signalPool) put(ch chan struct{}) { p.pool.Put(ch) }
