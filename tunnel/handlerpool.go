package tunnel

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rprtunnel/rpr/internal/store"
)

// handlerIdle is how often a server's handler pool retires the goroutines
// that are idle at that moment.
const handlerIdle = 10 * time.Second

// handlerJob is one claimed request to handle (see serveRun.handle), or,
// when reader is set, a queue's read loop to go on with. A job with
// retire set asks the goroutine that takes it to exit.
type handlerJob struct {
	queue    *queue
	req      *received
	decision store.Decision
	reader   *reader
	retire   bool
}

// handlerPool runs a server's handlers on goroutines it keeps between
// requests. A fresh goroutine per request grew its stack on every request
// (decoding a protobuf needs more than a new goroutine's stack): that
// copying was an eighth of a server's CPU at 128 concurrent calls.
// Concurrency stays bounded by the server's handler slots, which every
// job holds.
//
// An idle goroutine waits on the jobs channel alone, a plain receive:
// waiting in a select on the jobs, a stop channel and an idle timer cost
// about 5% of a busy server's CPU (the select locks every channel, and a
// timer channel is set in the runtime's heap on each wait). Idle
// goroutines are retired instead by one trimmer per pool, which every
// idle interval (handlerIdle for a server) hands a retire job to each
// goroutine idle at that moment: an idle server holds none after at most
// that interval, and a busy one starts a few goroutines afresh once per
// interval.
type handlerPool struct {
	handle  func(handlerJob)
	jobs    chan handlerJob // unbuffered: a send succeeds only when a goroutine is idle
	alive   atomic.Int64    // goroutines running loop
	stop    chan struct{}   // closed by close: the trimmer exits
	trimmed chan struct{}   // closed by the trimmer when it exits
	wg      sync.WaitGroup  // goroutines alive
}

// newHandlerPool starts a pool that runs jobs with handle and retires its
// idle goroutines every idle; stop it with close.
func newHandlerPool(handle func(handlerJob), idle time.Duration) *handlerPool {
	p := &handlerPool{handle: handle, jobs: make(chan handlerJob), stop: make(chan struct{}), trimmed: make(chan struct{})}
	go p.trim(idle)
	return p
}

// run hands job to an idle goroutine, or starts one for it.
func (p *handlerPool) run(job handlerJob) {
	select {
	case p.jobs <- job:
		return
	default:
	}
	p.wg.Add(1)
	p.alive.Add(1)
	go p.loop(job)
}

// loop handles job, then whatever run hands it, until it is handed a
// retire job or the pool closes.
func (p *handlerPool) loop(job handlerJob) {
	defer p.wg.Done()
	defer p.alive.Add(-1)
	for {
		p.handle(job)
		var ok bool
		if job, ok = <-p.jobs; !ok || job.retire {
			return
		}
	}
}

// trim retires the goroutines idle at each tick of idle, until the pool
// closes.
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

// retireIdle hands a retire job to each goroutine idle now. It stops at
// the number alive, so that goroutines coming back from their jobs
// meanwhile cannot keep it going.
func (p *handlerPool) retireIdle() {
	for n := p.alive.Load(); n > 0; n-- {
		select {
		case p.jobs <- handlerJob{retire: true}:
		default:
			return // none idle
		}
	}
}

// close stops the pool's goroutines once they have finished their jobs;
// run must not be called after it.
func (p *handlerPool) close() {
	close(p.stop)
	<-p.trimmed // no retire job is sent after this
	close(p.jobs)
	p.wg.Wait()
}
