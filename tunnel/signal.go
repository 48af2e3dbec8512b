package tunnel

import "sync"

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
