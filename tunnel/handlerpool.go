package tunnel

import (
	"sync"
	"time"

	"github.com/rprtunnel/rpr/internal/store"
)

// handlerIdle is how long a handler goroutine waits at least for its next
// request before it exits (at most twice as long).
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
// copying was an eighth of a server's CPU at 128 concurrent calls. A
// goroutine that finds no request for handlerIdle exits, so an idle server
// holds none. Concurrency stays bounded by the server's handler slots,
// which every job holds.
type handlerPool struct {
	handle func(handlerJob)
	jobs   chan handlerJob // unbuffered: a send succeeds only when a goroutine is idle
	stop   chan struct{}
	wg     sync.WaitGroup // goroutines alive
}

func newHandlerPool(handle func(handlerJob)) *handlerPool {
	return &handlerPool{handle: handle, jobs: make(chan handlerJob), stop: make(chan struct{})}
}

// run hands job to an idle goroutine, or starts one for it.
func (p *handlerPool) run(job handlerJob) {
	select {
	case p.jobs <- job:
		return
	default:
	}
	p.wg.Add(1)
	go p.loop(job)
}

// loop handles job, then whatever run hands it, until a whole handlerIdle
// passes without a job or the pool closes.
func (p *handlerPool) loop(job handlerJob) {
	defer p.wg.Done()
	// One ticker for the goroutine's life rather than a timer reset per
	// job: a reset per request cost about 1% of a busy server's CPU.
	idle := time.NewTicker(handlerIdle)
	defer idle.Stop()
	for ok := true; ok; job, ok = p.next(idle.C) {
		p.handle(job)
	}
}

// next waits for the goroutine's next job. It reports false when the pool
// closes, or at the second tick without a job: the first may come at once,
// the second comes a whole handlerIdle later.
func (p *handlerPool) next(tick <-chan time.Time) (handlerJob, bool) {
	for ticks := 0; ticks < 2; {
		select {
		case job := <-p.jobs:
			return job, true
		case <-tick:
			ticks++
		case <-p.stop:
			return handlerJob{}, false
		}
	}
	return handlerJob{}, false
}

// close stops the pool's goroutines once they have finished their jobs;
// run must not be called after it.
func (p *handlerPool) close() {
	close(p.stop)
	p.wg.Wait()
}
