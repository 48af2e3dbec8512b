package faulttest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is a server or client process: the test binary re-executed in a
// role. Process hygiene as in internal/redistest: signals go only through
// the os.Process handle of the process we started (a pidfd on Linux, so
// never a recycled PID), the child gets PR_SET_PDEATHSIG=SIGKILL so it dies
// with the test binary, and a cleanup kills it if the test left it running.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	out  *procOutput
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // Wait's result, valid after done
}

// procOutput collects a process' stdout and stderr and notices marker
// lines (a line consisting of the marker alone).
type procOutput struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	partial []byte
	seen    map[string]chan struct{}
}

func newProcOutput(markers ...string) *procOutput {
	o := &procOutput{seen: map[string]chan struct{}{}}
	for _, m := range markers {
		o.seen[m] = make(chan struct{})
	}
	return o
}

func (o *procOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	o.partial = append(o.partial, p...)
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(o.partial[:i]))
		o.partial = o.partial[i+1:]
		if ch, ok := o.seen[line]; ok {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
	}
	return len(p), nil
}

func (o *procOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// procMarkers are the lines a role prints that a test may wait for.
var procMarkers = []string{markerReady, markerCalling}

// startProc runs the test binary in a role with env added to the test's
// environment, and registers its cleanup.
func startProc(t *testing.T, name string, env ...string) *proc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("finding the test binary: %v", err)
	}
	p := &proc{t: t, name: name, out: newProcOutput(procMarkers...), done: make(chan struct{})}
	// No test flags: TestMain runs the role before flag parsing matters.
	p.cmd = exec.Command(self)
	// GORACE: a -race binary otherwise sleeps 1 s on exit.
	p.cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			p.Kill()
		}
		switch {
		case showLogs():
			t.Logf("output of %s (pid %d):\n%s", p.name, p.PID(), p.out.String())
		case t.Failed():
			t.Logf("output of %s (pid %d):\n%s", p.name, p.PID(), tailLines(p.out.String(), 40))
		}
	})
	return p
}

// PID is the process id.
func (p *proc) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited (and been reaped).
func (p *proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitMarker waits until the process prints marker on a line of its own.
// It fails the test if the process exits first or the wait runs out.
func (p *proc) waitMarker(marker string, timeout time.Duration) {
	p.t.Helper()
	select {
	case <-p.out.seen[marker]:
	case <-p.done:
		p.t.Fatalf("%s (pid %d) exited (%v) before printing %q:\n%s", p.name, p.PID(), p.err, marker, tailLines(p.out.String(), 40))
	case <-time.After(timeout):
		p.t.Fatalf("%s (pid %d) did not print %q within %v:\n%s", p.name, p.PID(), marker, timeout, tailLines(p.out.String(), 40))
	}
}

// Kill sends SIGKILL, a crash with no chance to clean up, and waits until
// the process is gone.
func (p *proc) Kill() {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.t.Errorf("%s (pid %d) still there 10s after SIGKILL", p.name, p.PID())
	}
}

// Term sends SIGTERM and waits up to timeout for the process to exit. It
// returns the process' exit error (nil for status 0), or an error if it did
// not exit in time (it is then killed).
func (p *proc) Term(timeout time.Duration) error {
	if p.Exited() {
		return p.err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("%s (pid %d) did not exit within %v of SIGTERM; killed", p.name, p.PID(), timeout)
	}
}

// serverConfig configures a server process.
type serverConfig struct {
	worker      string        // worker id, e.g. "w1"
	lease       time.Duration // 0: the runtime's default
	concurrency int           // 0: the runtime's default
}

// startServers starts one server process per config, all at once, and
// waits until each is ready (serving, heartbeat in Redis).
func startServers(t *testing.T, redisURL string, cfgs ...serverConfig) []*proc {
	t.Helper()
	procs := make([]*proc, len(cfgs))
	for i, c := range cfgs {
		env := []string{envRole + "=" + roleServer, envRedisURL + "=" + redisURL, envWorker + "=" + c.worker}
		if c.lease > 0 {
			env = append(env, envLease+"="+c.lease.String())
		}
		if c.concurrency > 0 {
			env = append(env, envConcurrency+"="+strconv.Itoa(c.concurrency))
		}
		procs[i] = startProc(t, "server "+c.worker, env...)
	}
	for _, p := range procs {
		p.waitMarker(markerReady, 60*time.Second)
	}
	return procs
}

// startClientProc starts a client process that makes one Write call with
// value sleep and the given timeout, as client instance id.
func startClientProc(t *testing.T, redisURL, id, sleep string, timeout time.Duration) *proc {
	t.Helper()
	return startProc(t, "client "+id,
		envRole+"="+roleClient, envRedisURL+"="+redisURL, envClientID+"="+id,
		envCallSleep+"="+sleep, envCallTimeout+"="+timeout.String())
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
