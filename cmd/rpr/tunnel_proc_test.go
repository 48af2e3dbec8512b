package main

// The child processes of the tunnel tests (tunnel_e2e_test.go,
// tunnel_fault_test.go): the test binary re-executed as rpr itself, or in
// one of the helper roles of the two-network test, so that no separate
// build is needed and every child is built with the test's flags (-race
// included: a data race in a child fails the test).
//
// Process hygiene as in internal/redistest: a child is signalled only
// through the os.Process handle of the process this test started (a pidfd
// on Linux, so never a recycled PID), it gets PR_SET_PDEATHSIG=SIGKILL so
// that it dies with the test binary, and a cleanup ends it (SIGTERM, then
// SIGKILL) if the test left it running.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// envTunnelRole selects what the test binary runs instead of the
	// tests: roleRPR is the rpr command line (os.Args), the others are
	// registered in tunnelRoles.
	envTunnelRole = "RPR_TUNNEL_TEST_ROLE"
	roleRPR       = "rpr"
)

// tunnelRoles are the helper roles, by the value of envTunnelRole.
var tunnelRoles = map[string]func() int{}

func TestMain(m *testing.M) {
	switch role := os.Getenv(envTunnelRole); role {
	case "":
		os.Exit(m.Run())
	case roleRPR:
		main() // exits non-zero by itself on an error
		os.Exit(0)
	default:
		if run := tunnelRoles[role]; run != nil {
			os.Exit(run())
		}
		fmt.Fprintf(os.Stderr, "rpr test binary: unknown %s=%q\n", envTunnelRole, role)
		os.Exit(2)
	}
}

// tunOutput collects a child's stdout and stderr, line by line.
type tunOutput struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	lines   []string
	partial []byte
	changed chan struct{} // closed and replaced on every new line
}

func newTunOutput() *tunOutput { return &tunOutput{changed: make(chan struct{})} }

func (o *tunOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	o.partial = append(o.partial, p...)
	grew := false
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			break
		}
		o.lines = append(o.lines, strings.TrimRight(string(o.partial[:i]), "\r"))
		o.partial = o.partial[i+1:]
		grew = true
	}
	if grew {
		close(o.changed)
		o.changed = make(chan struct{})
	}
	return len(p), nil
}

func (o *tunOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// Lines returns the complete lines so far.
func (o *tunOutput) Lines() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.lines...)
}

// find returns the first line that match accepts, and a channel that is
// closed when another line arrives.
func (o *tunOutput) find(match func(string) bool) (string, bool, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, l := range o.lines {
		if match(l) {
			return l, true, nil
		}
	}
	return "", false, o.changed
}

// tunProc is one child process.
type tunProc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	out  *tunOutput
	done chan struct{} // closed once it has exited and been reaped
	err  error         // Wait's result, valid after done
}

// tunCommand is the test binary in role (roleRPR: with args as rpr's
// command line), inside network namespace ns unless ns is empty.
func tunCommand(ctx context.Context, t *testing.T, ns, role string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("finding the test binary: %v", err)
	}
	var cmd *exec.Cmd
	if ns == "" {
		cmd = exec.CommandContext(ctx, self, args...)
	} else {
		// `ip netns exec` execs in place: cmd.Process is the program itself.
		cmd = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, self}, args...)...)
	}
	// GORACE: a -race binary otherwise sleeps 1 s on exit.
	cmd.Env = append(append(os.Environ(), envTunnelRole+"="+role, "GORACE=atexit_sleep_ms=0"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// startTunProc starts a child that runs until the test ends it.
func startTunProc(t *testing.T, name, ns, role string, env []string, args ...string) *tunProc {
	t.Helper()
	p := &tunProc{t: t, name: name, out: newTunOutput(), done: make(chan struct{})}
	p.cmd = tunCommand(context.Background(), t, ns, role, env, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			if err := p.Term(15 * time.Second); err != nil {
				t.Errorf("%s: %v", p.name, err)
			}
		}
		out := p.out.String()
		if strings.Contains(out, "WARNING: DATA RACE") {
			t.Errorf("%s (pid %d) reported a data race:\n%s", p.name, p.PID(), out)
		} else if t.Failed() || os.Getenv("RPR_TUNNEL_TEST_LOGS") != "" {
			t.Logf("output of %s (pid %d, %v):\n%s", p.name, p.PID(), p.err, tailLines(out, 60))
		}
	})
	return p
}

// startRPRProc starts rpr with args (rpr egress, rpr ingress) as a child.
func startRPRProc(t *testing.T, name, ns string, args ...string) *tunProc {
	t.Helper()
	return startTunProc(t, name, ns, roleRPR, nil, args...)
}

// PID is the child's process id.
func (p *tunProc) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the child has exited (and been reaped).
func (p *tunProc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitLine waits until the child prints a line that match accepts and
// returns it; it fails the test when the child exits first or timeout
// passes.
func (p *tunProc) waitLine(what string, timeout time.Duration, match func(string) bool) string {
	p.t.Helper()
	deadline := time.After(timeout)
	for {
		line, ok, changed := p.out.find(match)
		if ok {
			return line
		}
		select {
		case <-changed:
		case <-p.done:
			if line, ok, _ := p.out.find(match); ok {
				return line
			}
			p.t.Fatalf("%s (pid %d) exited (%v) before printing %s:\n%s", p.name, p.PID(), p.err, what, tailLines(p.out.String(), 40))
		case <-deadline:
			p.t.Fatalf("%s (pid %d) did not print %s within %v:\n%s", p.name, p.PID(), what, timeout, tailLines(p.out.String(), 40))
		}
	}
}

// Kill sends SIGKILL, a crash with no chance to clean up, and waits until
// the child is gone.
func (p *tunProc) Kill() {
	p.t.Helper()
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

// Term sends SIGTERM and waits up to timeout for the child to exit; it
// returns its exit error, or an error saying it had to be killed.
func (p *tunProc) Term(timeout time.Duration) error {
	if p.Exited() {
		return p.err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("pid %d did not exit within %v of SIGTERM; killed", p.PID(), timeout)
	}
}

// tunRun is what a child that ran to its end printed.
type tunRun struct {
	out     string // stdout and stderr
	code    int
	elapsed time.Duration
}

// runRPRChild runs rpr with args to its end (at most timeout) in ns ("":
// here) and returns what it printed and its exit status.
func runRPRChild(t *testing.T, ns string, timeout time.Duration, args ...string) tunRun {
	t.Helper()
	return runTunChild(t, ns, roleRPR, nil, timeout, args...)
}

// runTunChild runs the test binary in role to its end.
func runTunChild(t *testing.T, ns, role string, env []string, timeout time.Duration, args ...string) tunRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := tunCommand(ctx, t, ns, role, env, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	run := tunRun{out: out.String(), elapsed: time.Since(t0)}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		run.code = exit.ExitCode()
	default:
		t.Fatalf("%s %s: %v (after %v)\n%s", role, strings.Join(args, " "), err, run.elapsed.Round(time.Millisecond), run.out)
	}
	if strings.Contains(run.out, "WARNING: DATA RACE") {
		t.Errorf("%s %s reported a data race:\n%s", role, strings.Join(args, " "), run.out)
	}
	return run
}

// ingressAddrs reads the addresses from rpr ingress's start line:
// "rpr ingress: taking HTTP and gRPC on http://ADDR[, gRPC alone on
// ADDR], through ...".
func ingressAddrs(t *testing.T, line string) (httpAddr, grpcAddr string) {
	t.Helper()
	rest, ok := strings.CutPrefix(line, "rpr ingress: taking HTTP and gRPC on http://")
	if !ok {
		t.Fatalf("not rpr ingress's start line: %q", line)
	}
	httpAddr, rest, _ = strings.Cut(rest, ",")
	if g, ok := strings.CutPrefix(strings.TrimSpace(rest), "gRPC alone on "); ok {
		grpcAddr, _, _ = strings.Cut(g, ",")
	}
	for _, a := range []string{httpAddr, grpcAddr} {
		if _, _, err := net.SplitHostPort(a); a != "" && err != nil {
			t.Fatalf("rpr ingress's start line %q: address %q: %v", line, a, err)
		}
	}
	return httpAddr, grpcAddr
}

// startIngressProc starts rpr ingress listening on host's port 0 (and
// gRPC alone on another, when grpc is set) and returns it with its
// addresses.
func startIngressProc(t *testing.T, ns, redisURL, host string, grpc bool) (p *tunProc, httpAddr, grpcAddr string) {
	t.Helper()
	args := []string{"ingress", "--redis", redisURL, "--listen", net.JoinHostPort(host, "0")}
	if grpc {
		args = append(args, "--grpc-listen", net.JoinHostPort(host, "0"))
	}
	p = startRPRProc(t, "rpr ingress", ns, args...)
	line := p.waitLine("its start line", 60*time.Second, func(l string) bool {
		return strings.HasPrefix(l, "rpr ingress: taking")
	})
	httpAddr, grpcAddr = ingressAddrs(t, line)
	return p, httpAddr, grpcAddr
}

// startEgressProc starts rpr egress as worker id and waits for its start
// line (it may not beat yet: see tunWorld.waitLive).
func startEgressProc(t *testing.T, ns, redisURL, id string, extra ...string) *tunProc {
	t.Helper()
	p := startRPRProc(t, "rpr egress "+id, ns, append([]string{"egress", "--redis", redisURL, "--worker-id", id}, extra...)...)
	p.waitLine("its start line", 60*time.Second, func(l string) bool {
		return strings.HasPrefix(l, "rpr egress: worker "+id+" ")
	})
	return p
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// tunWait polls cond every 20 ms until it holds, failing the test after
// timeout.
func tunWait(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
