package tunnel

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rprtunnel/rpr/internal/store"
)

// handlerIdle is how long a server's handler pool keeps a goroutine that
// has had nothing to do: it is retired after between one and two of these.
const handlerIdle = 10 * time.Second

// handlerJob is one claimed request to handle (see serveRun.handle), or,
// when reader is set, a queue's read loop to go on with.
type handlerJob struct {
	queue    *queue
	req      *received
	decision store.Decision
	reader   *reader
}

// handlerPool runs a server's handlers on goroutines it keeps between
// requests. A fresh goroutine per request grew its stack on every request
// (decoding a protobuf needs more than a new goroutine's stack): that
// copying was an eighth of a server's CPU at 128 concurrent calls.
// Concurrency stays bounded by the server's handler slots, which every
// job holds.
//
// The goroutine idle the shortest takes the next job (last in, first
// out). Handing jobs round to every idle goroutine in turn, as a shared
// channel does, used them all between two garbage collections; each
// collection shrinks the stack of a goroutine waiting at the top of its
// loop, so each then grew its stack again on its next job, about 5% of a
// busy server's CPU. Last in, first out keeps the goroutines in use as
// few as the handlers running at once, and leaves the others idle to be
// retired.
//
// An idle goroutine waits on a channel of its own alone, a plain
// receive: waiting in a select on the jobs, a stop channel and an idle
// timer cost about 5% of a busy server's CPU (the select locks every
// channel, and a timer channel is set in the runtime's heap on each
// wait). One trimmer per pool retires, every idle interval (handlerIdle
// for a server), the goroutines that have been idle since the interval
// before: an idle server holds none after at most two intervals.
type handlerPool struct {
	handle func(handlerJob)
	alive  atomic.Int64 // goroutines running loop

	mu sync.Mutex
	// idle are the goroutines waiting for a job, the most recently idle
	// last.
	idle []*handlerWorker
	// tick counts the trimmer's ticks; a worker notes it when it goes
	// idle, so that the trimmer knows who waited a whole interval.
	tick   uint64
	closed bool

	stop    chan struct{} // closed by close: the trimmer exits
	trimmed chan struct{} // closed by the trimmer when it exits
	wg      sync.WaitGroup
}

// handlerWorker is one goroutine of a handlerPool, as the pool sees it
// while it is idle.
type handlerWorker struct {
	// jobs holds at most the one job handed to the worker; it is closed
	// to retire the worker.
	jobs chan handlerJob
	// idleSince is the pool's tick when the worker last went idle.
	idleSince uint64
}

// newHandlerPool starts a pool that runs jobs with handle and retires
// goroutines idle for an interval of idle; stop it with close.
func newHandlerPool(handle func(handlerJob), idle time.Duration) *handlerPool {
	p := &handlerPool{handle: handle, stop: make(chan struct{}), trimmed: make(chan struct{})}
	go p.trim(idle)
	return p
}

// run hands job to the most recently idle goroutine, or starts one for
// it. It must not be called after close.
func (p *handlerPool) run(job handlerJob) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.jobs <- job // room for one, and nobody else sends to w
		return
	}
	p.mu.Unlock()
	p.wg.Add(1)
	p.alive.Add(1)
	go p.loop(job)
}

// loop handles job, then whatever run hands it, until it is retired or
// the pool closes.
func (p *handlerPool) loop(job handlerJob) {
	defer p.wg.Done()
	defer p.alive.Add(-1)
	w := &handlerWorker{jobs: make(chan handlerJob, 1)}
	for {
		p.handle(job)
		if !p.wait(w) {
			return
		}
		var ok bool
		if job, ok = <-w.jobs; !ok {
			return // retired
		}
	}
}

// wait puts w among the idle, unless the pool has closed.
func (p *handlerPool) wait(w *handlerWorker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	w.idleSince = p.tick
	p.idle = append(p.idle, w)
	return true
}

// trim retires, at each tick of idle, the goroutines idle since before
// the tick before, until the pool closes.
func (p *handlerPool) trim(idle time.Duration) {
	defer close(p.trimmed)
	tick := time.NewTicker(idle)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
			p.retireIdle()
		}
	}
}

// retireIdle retires the goroutines that went idle before the previous
// tick: they are the first of p.idle.
func (p *handlerPool) retireIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for n < len(p.idle) && p.idle[n].idleSince < p.tick {
		close(p.idle[n].jobs)
		n++
	}
	kept := copy(p.idle, p.idle[n:])
	clear(p.idle[kept:])
	p.idle = p.idle[:kept]
	p.tick++
}

// close stops the pool's goroutines once they have finished their jobs;
// run must not be called after it.
func (p *handlerPool) close() {
	close(p.stop)
	<-p.trimmed
	p.mu.Lock()
	p.closed = true
	for _, w := range p.idle {
		close(w.jobs)
	}
	clear(p.idle)
	p.idle = nil
	p.mu.Unlock()
	p.wg.Wait()
}
