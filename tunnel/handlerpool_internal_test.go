package tunnel

import (
	"sync"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/internal/store"
)

// TestHandlerPoolRetiresIdle: goroutines that finished their jobs are
// retired within two idle ticks, busy ones are not, a job after
// that starts a goroutine afresh, and close returns once every goroutine
// has exited.
func TestHandlerPoolRetiresIdle(t *testing.T) {
	p, ran, release := blockingPool()
	defer p.close()

	ran.Add(5)
	for range 4 {
		p.run(handlerJob{})
	}
	p.run(handlerJob{decision: blockDecision})
	waitUntil(t, func() bool { return p.alive.Load() == 1 })

	close(release) // the busy one finishes, and is retired in turn
	ran.Wait()
	waitUntil(t, func() bool { return p.alive.Load() == 0 })

	ran.Add(1)
	p.run(handlerJob{})
	ran.Wait()
	if n := p.alive.Load(); n > 1 {
		t.Fatalf("%d goroutines alive after one job, want at most 1", n)
	}
}

// TestHandlerPoolCloseEndsIdle: close ends idle goroutines without waiting
// for a tick.
func TestHandlerPoolCloseEndsIdle(t *testing.T) {
	var ran sync.WaitGroup
	p := newHandlerPool(func(handlerJob) { ran.Done() }, time.Hour)
	ran.Add(3)
	for range 3 {
		p.run(handlerJob{})
	}
	ran.Wait()
	closed := make(chan struct{})
	go func() { p.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("close did not return within 10s with idle goroutines")
	}
	if n := p.alive.Load(); n != 0 {
		t.Fatalf("%d goroutines alive after close", n)
	}
}

// TestHandlerPoolRetiresUnneededWhileBusy: jobs that come one at a time
// go to the goroutine idle the shortest, so the pool's other goroutines
// stay idle and are retired although the pool never goes idle. (Handed
// round to every idle goroutine in turn, the jobs would keep all four
// alive.)
func TestHandlerPoolRetiresUnneededWhileBusy(t *testing.T) {
	p, ran, release := blockingPool()
	defer p.close()

	ran.Add(4)
	for range 4 {
		p.run(handlerJob{decision: blockDecision})
	}
	close(release)
	ran.Wait()
	bound := time.Now().Add(30 * time.Second)
	jobs := 0
	for p.alive.Load() > 1 {
		if time.Now().After(bound) {
			t.Fatalf("%d goroutines alive after %d jobs one at a time over 30s, want 1", p.alive.Load(), jobs)
		}
		waitUntil(t, func() bool { return p.idleCount() == int(p.alive.Load()) }) // the last job's goroutine is back
		ran.Add(1)
		p.run(handlerJob{})
		ran.Wait()
		jobs++
		time.Sleep(time.Millisecond)
	}
}

// idleCount is how many of p's goroutines wait for a job.
func (p *handlerPool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// blockingPool returns a pool retiring goroutines idle for 20ms whose
// handler counts each job done on ran and, for a job with blockDecision,
// first waits until release is closed.
func blockingPool() (p *handlerPool, ran *sync.WaitGroup, release chan struct{}) {
	ran, release = new(sync.WaitGroup), make(chan struct{})
	p = newHandlerPool(func(job handlerJob) {
		defer ran.Done()
		if job.decision.Verdict == blockDecision.Verdict {
			<-release
		}
	}, 20*time.Millisecond)
	return p, ran, release
}

// blockDecision marks the job whose handler blocks until released.
var blockDecision = store.Decision{Verdict: "block"}
