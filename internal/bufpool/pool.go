package bufpool

import (
	"math/bits"
	"sync"
)

// Size classes run from MinSize to MaxSize in quarter steps of each power
// of two (256, 320, 384, 448, 512, 640, ...), so that a buffer is never
// more than a quarter bigger than asked: a message of 1 MiB and a few
// bytes takes a buffer of 1.25 MiB, not 2 MiB. A buffer asked for beyond
// MaxSize is allocated and never kept, so that one huge message does not
// pin its memory in the pool.
const (
	minShift = 8  // 256 B
	maxShift = 22 // 4 MiB
	MinSize  = 1 << minShift
	MaxSize  = 1 << maxShift
	steps    = 4 // classes per power of two
)

// classes is how many size classes there are: MinSize, then four for each
// power of two up to MaxSize.
const classes = 1 + steps*(maxShift-minShift)

// Pool hands out buffers by size class. The zero Pool is ready to use; a
// Pool must not be copied after first use.
type Pool struct {
	classes [classes]sync.Pool
}

// classSize is the capacity of class c's buffers.
func classSize(c int) int {
	if c == 0 {
		return MinSize
	}
	c--
	shift := minShift + c/steps                // the power of two the class is above
	return 1<<shift + (c%steps+1)<<shift/steps // a quarter step at a time
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
	shift := bits.Len(uint(size-1)) - 1 // 1<<shift < size <= 2<<shift
	step := (size - 1 - 1<<shift) / (1 << shift / steps)
	return 1 + (shift-minShift)*steps + step
}

// fills is the index of the largest class whose buffers n bytes can
// serve, or -1 when n is below MinSize or beyond MaxSize.
func fills(n int) int {
	if n < MinSize || n > MaxSize {
		return -1
	}
	c := class(n)
	if classSize(c) > n {
		c--
	}
	return c
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
	b := make([]byte, 0, classSize(c))
	return &b
}

// Put gives b back for reuse; nothing may read or write it afterwards. A
// buffer grown past its class (an append outgrew it) goes to the class
// its capacity fills; one beyond MaxSize, or smaller than MinSize, is
// left to the garbage collector.
func (p *Pool) Put(b *[]byte) {
	c := fills(cap(*b))
	if c < 0 {
		return
	}
	*b = (*b)[:0]
	p.classes[c].Put(b)
}
