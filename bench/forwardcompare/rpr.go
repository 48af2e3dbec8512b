package main

// The rpr side of the comparison: the rpr binary, built from this
// checkout's cmd/rpr, run as real processes (rpr ingress, rpr egress) and
// stopped by their PIDs at the end.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rprtunnel/rpr/bench/internal/compare"
)

// buildRPR builds the rpr command of the checkout holding the working
// directory into dir and returns the binary's path.
func buildRPR(ctx context.Context, dir string, log io.Writer) (string, error) {
	src, err := findCLI()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "rpr")
	fmt.Fprintf(log, "building rpr from %s ...\n", src)
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in %s: %w\n%s(or give a built one: -rpr PATH or $RPR_BIN)", src, err, out)
	}
	return bin, nil
}

// findCLI finds cmd/rpr (its own module) in the working directory or a
// parent of it: bench/ when run as documented, bench/forwardcompare under
// go test.
func findCLI() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		src := filepath.Join(d, "cmd", "rpr")
		if _, err := os.Stat(filepath.Join(src, "go.mod")); err == nil {
			return src, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no cmd/rpr/go.mod in %s or a parent of it: run from bench/, or give a built rpr with -rpr PATH", wd)
		}
	}
}

// proc is an rpr process this program started.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{} // closed once it has exited and been reaped
	ready   chan string   // the first stdout line starting with the ready prefix
}

// startProc starts bin with args; its stdout and stderr go to
// dir/name.log, and the first stdout line starting with readyPrefix is
// sent on p.ready.
func startProc(dir, name, readyPrefix, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, cmd: exec.Command(bin, args...), logPath: logPath, exited: make(chan struct{}), ready: make(chan string, 1)}
	p.cmd.Stdout = &lineWatcher{w: f, prefix: readyPrefix, found: p.ready}
	p.cmd.Stderr = f
	compare.DieWithParent(p.cmd)
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

// waitReady returns p's ready line, or fails when p exits or timeout
// passes first.
func (p *proc) waitReady(timeout time.Duration) (string, error) {
	select {
	case line := <-p.ready:
		return line, nil
	case <-p.exited:
		return "", fmt.Errorf("%s exited at start: %s", p.name, p.logTail())
	case <-time.After(timeout):
		return "", fmt.Errorf("%s did not start within %v: %s", p.name, timeout, p.logTail())
	}
}

// alive reports whether p still runs.
func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// cpu is p's user+system CPU so far.
func (p *proc) cpu() (time.Duration, error) {
	d, err := compare.PidCPU(p.cmd.Process.Pid)
	if err != nil {
		return 0, fmt.Errorf("%s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	return d, nil
}

// stop ends p by its PID: SIGTERM (rpr finishes the requests in flight),
// SIGKILL after 15s.
func (p *proc) stop() {
	if !p.alive() {
		return
	}
	compare.Terminate(p.cmd.Process, p.exited, 15*time.Second)
}

// logTail is the end of p's output, for error messages.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	b = bytes.TrimSpace(b)
	if len(b) > 2000 {
		b = append([]byte("…"), b[len(b)-2000:]...)
	}
	if len(b) == 0 {
		return "no output"
	}
	return string(b)
}

// lineWatcher copies to w and sends the first line starting with prefix
// on found.
type lineWatcher struct {
	w      io.Writer
	prefix string
	found  chan<- string
	mu     sync.Mutex
	line   []byte
	done   bool
}

func (l *lineWatcher) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for rest := b; !l.done && len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			l.line = append(l.line, rest...)
			break
		}
		l.line = append(l.line, rest[:i]...)
		rest = rest[i+1:]
		if s := string(l.line); strings.HasPrefix(s, l.prefix) {
			l.found <- s
			l.done = true
		}
		l.line = l.line[:0]
	}
	return l.w.Write(b)
}

// rprCLI runs one short rpr command (rpr upstreams set) and returns its
// output.
func rprCLI(ctx context.Context, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("rpr %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// field returns the word after marker in line ("on http://ADDR,"): the
// addresses rpr ingress prints when it is ready.
func field(line, marker string) (string, error) {
	_, rest, ok := strings.Cut(line, marker)
	if !ok {
		return "", errors.New("no " + strings.TrimSpace(marker) + " in " + line)
	}
	if i := strings.IndexAny(rest, ", "); i >= 0 {
		rest = rest[:i]
	}
	return rest, nil
}
