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

// Buffers of LargeSize and more are also kept outside sync.Pool, up to
// KeptBytes in all per Pool: sync.Pool drops what sat through two
// garbage collections, and a program echoing 1 MiB messages collects
// every few calls, so about one buffer in ten came back allocated anew
// (a third of a payload size per 1 MiB call). What is kept stays in
// memory for the Pool's life, which KeptBytes bounds.
const (
	LargeSize = 64 << 10
	KeptBytes = 16 << 20
)

// Pool hands out buffers by size class. The zero Pool is ready to use; a
// Pool must not be copied after first use.
type Pool struct {
	classes [classes]sync.Pool

	mu        sync.Mutex
	kept      [classes][]*[]byte // large buffers no collection takes
	keptBytes int
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
	if classSize(c) >= LargeSize {
		if b := p.takeKept(c); b != nil {
			return b
		}
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, classSize(c))
	return &b
}

// takeKept returns a kept buffer of class c, nil when none is kept.
func (p *Pool) takeKept(c int) *[]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.kept[c])
	if n == 0 {
		return nil
	}
	b := p.kept[c][n-1]
	p.kept[c][n-1] = nil
	p.kept[c] = p.kept[c][:n-1]
	p.keptBytes -= cap(*b)
	return b
}

// keep keeps b, of class c, when KeptBytes allows; it reports whether it
// did.
func (p *Pool) keep(c int, b *[]byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.keptBytes+cap(*b) > KeptBytes {
		return false
	}
	p.kept[c] = append(p.kept[c], b)
	p.keptBytes += cap(*b)
	return true
}

// PutAll puts each of bufs (see Put): the buffers one owner held
// together, such as the values of a stream entry lent by a reader.
func (p *Pool) PutAll(bufs []*[]byte) {
	for _, b := range bufs {
		p.Put(b)
	}
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
	if cap(*b) >= LargeSize && p.keep(c, b) {
		return
	}
	p.classes[c].Put(b)
}
