package bufpool

import (
	"math/bits"
	"sync"
)

// Size classes: powers of two from MinSize to MaxSize. A buffer asked for
// beyond MaxSize is allocated and never kept, so that one huge message
// does not pin its memory in the pool.
const (
	minShift = 8  // 256 B
	maxShift = 22 // 4 MiB
	MinSize  = 1 << minShift
	MaxSize  = 1 << maxShift
)

// Pool hands out buffers by size class. The zero Pool is ready to use; a
// Pool must not be copied after first use.
type Pool struct {
	classes [maxShift - minShift + 1]sync.Pool
}

// class is the index of the smallest class that holds size bytes, or -1
// beyond MaxSize.
func class(size int) int {
	if size <= MinSize {
		return 0
	}
	if size > MaxSize {
		return -1
	}
	return bits.Len(uint(size-1)) - minShift
}

// Get returns an empty buffer whose capacity is at least size. Its caller
// owns it until it gives it to Put.
func (p *Pool) Get(size int) *[]byte {
	c := class(size)
	if c < 0 {
		b := make([]byte, 0, size)
		return &b
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 1<<(c+minShift))
	return &b
}

// Put gives b back for reuse; nothing may read or write it afterwards. A
// buffer grown past its class (an append outgrew it) goes to the class
// its capacity fills; one beyond MaxSize, or smaller than MinSize, is
// left to the garbage collector.
func (p *Pool) Put(b *[]byte) {
	n := cap(*b)
	if n < MinSize || n > MaxSize {
		return
	}
	c := bits.Len(uint(n)) - 1 - minShift // the largest class n fills
	*b = (*b)[:0]
	p.classes[c].Put(b)
}
