package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// benchProgress counts calls and, on a terminal, redraws one status line
// on stderr about once a second; elsewhere it prints one line per phase
// at its end.
type benchProgress struct {
	w        io.Writer
	terminal bool

	calls, errors atomic.Int64
	phase         string
	limit         int64
	timeLimit     time.Duration
	began         time.Time
	quit          chan struct{}
	finished      sync.WaitGroup
}

func newBenchProgress(w io.Writer) *benchProgress {
	return &benchProgress{w: w, terminal: isTerminal(w)}
}

func (p *benchProgress) done(failed bool) {
	p.calls.Add(1)
	if failed {
		p.errors.Add(1)
	}
}

func (p *benchProgress) start(phase string, limit int64, timeLimit time.Duration) {
	p.calls.Store(0)
	p.errors.Store(0)
	p.phase, p.limit, p.timeLimit, p.began = phase, limit, timeLimit, time.Now()
	if !p.terminal {
		return
	}
	p.quit = make(chan struct{})
	p.finished.Add(1)
	go func() {
		defer p.finished.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last, lastAt := int64(0), p.began
		fmt.Fprintf(p.w, "\r\033[K%s", p.line(0, 0))
		for {
			select {
			case <-p.quit:
				fmt.Fprint(p.w, "\r\033[K")
				return
			case now := <-tick.C:
				calls := p.calls.Load()
				rate := float64(calls-last) / now.Sub(lastAt).Seconds()
				last, lastAt = calls, now
				fmt.Fprintf(p.w, "\r\033[K%s", p.line(calls, rate))
			}
		}
	}()
}

func (p *benchProgress) stop() {
	if p.terminal {
		close(p.quit)
		p.finished.Wait()
		return
	}
	if p.phase != "" {
		return // a warm-up: only the measured phase gets its line
	}
	elapsed := time.Since(p.began)
	calls := p.calls.Load()
	fmt.Fprintf(p.w, "rpr bench: %s\n", p.line(calls, float64(calls)/elapsed.Seconds()))
}

// line is the status text: calls so far, calls/s, errors and time.
func (p *benchProgress) line(calls int64, rate float64) string {
	var b strings.Builder
	if p.phase != "" {
		b.WriteString(p.phase + ": ")
	}
	b.WriteString(benchGroup(calls))
	if p.limit > 0 {
		b.WriteString("/" + benchGroup(p.limit))
	}
	fmt.Fprintf(&b, " calls, %s calls/s, %s errors, %s", benchGroup(int64(math.Round(rate))), benchGroup(p.errors.Load()),
		time.Since(p.began).Round(100*time.Millisecond))
	if p.timeLimit > 0 {
		b.WriteString(" of " + p.timeLimit.String())
	}
	return b.String()
}
