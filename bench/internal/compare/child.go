package compare

// Servers in a process of their own: a program built on this package runs
// as a server child when ChildEnv is set, and the parent starts it, reads
// its allocation and CPU counters over a pipe, and ends it by its PID.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/tunnel"
)

// ChildEnv names the environment variable that makes a program a server
// child (RunChildIfAsked): "rpr <redis URL>" serves the echo service on
// rpr, "plain <redis URL>" serves it on the plain Streams RPC (see
// StartPlainClients), "plainconc <redis URL>" on the same with its
// handlers run concurrently, "plainpush <redis URL>" on that with its
// answers pushed (StartPlainClients with pushed), "grpc" serves it on
// gRPC-go on a free loopback port.
const ChildEnv = "RPR_BENCH_CHILD"

// ChildServerConcurrency is the rpr child's ServerOptions.Concurrency:
// above the highest concurrency the comparisons run, so that the server's
// bound on handlers never queues the load.
const ChildServerConcurrency = 256

// RunChildIfAsked serves as a child when ChildEnv is set and then returns
// true with the exit code; it returns false at once otherwise. Call it
// first in main (and in TestMain). A child prints "ready <addr>" once it
// serves ("-" for rpr, which listens on nothing), answers each "stats"
// line on its stdin with "stats <mallocs> <total alloc bytes> <cpu ns>
// <commands sent> <GCs>",
// and stops when its stdin ends or on SIGTERM.
func RunChildIfAsked() (ran bool, code int) {
	mode, ok := os.LookupEnv(ChildEnv)
	if !ok {
		return false, 0
	}
	if err := runChild(mode); err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return true, 1
	}
	return true, 0
}

func runChild(mode string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	kind, arg, _ := strings.Cut(mode, " ")
	served := make(chan error, 1)
	sent := &redisinfo.Sent{}
	var addr string
	switch kind {
	case "rpr":
		rdb, err := tunnel.Open(ctx, arg)
		if err != nil {
			return fmt.Errorf("opening Redis %s: %w", arg, err)
		}
		defer rdb.Close()
		rdb.AddHook(sent)
		srv, err := tunnel.NewServer(rdb, tunnel.ServerOptions{Concurrency: ChildServerConcurrency, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return fmt.Errorf("rpr server: %w", err)
		}
		srv.RegisterService(&rprEchoDesc, struct{}{})
		go func() { served <- srv.Serve(ctx) }()
		addr = "-"
	case "plain", "plainconc", "plainpush":
		serve := map[string]func(context.Context, *redis.Client) error{
			"plain": servePlainRPC, "plainconc": servePlainConcurrent, "plainpush": servePlainPushed,
		}[kind]
		opts, err := redis.ParseURL(arg)
		if err != nil {
			return fmt.Errorf("%s server: %w", kind, err)
		}
		rdb := redis.NewClient(opts)
		defer rdb.Close()
		rdb.AddHook(sent)
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("%s server: reaching Redis %s: %w", kind, arg, err)
		}
		go func() { served <- serve(ctx, rdb) }()
		addr = "-"
	case "grpc":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := NewGRPCEchoServer()
		go func() { served <- srv.Serve(l) }()
		defer func() {
			srv.Stop()
			<-served
		}()
		addr = l.Addr().String()
	default:
		return fmt.Errorf("%s=%q: want \"rpr <redis URL>\", \"plain <redis URL>\", \"plainconc <redis URL>\", \"plainpush <redis URL>\" or \"grpc\"", ChildEnv, mode)
	}
	fmt.Printf("ready %s\n", addr)

	// Requests on stdin; its end (the parent closed it, or died) stops
	// the child as SIGTERM does.
	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		sc := bufio.NewScanner(os.Stdin)
		var prof profile
		defer prof.stop()
		for sc.Scan() {
			cmd, arg, _ := strings.Cut(sc.Text(), " ")
			switch cmd {
			case "stats":
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				fmt.Printf("stats %d %d %d %d %d\n", m.Mallocs, m.TotalAlloc, int64(ProcessCPU()), sent.Commands(), m.NumGC)
			case "profile":
				fmt.Printf("profile %v\n", prof.start(arg))
			case "unprofile":
				fmt.Printf("unprofile %v\n", prof.stop())
			}
		}
	}()
	select {
	case <-ctx.Done():
	case <-stdinDone:
		stop()
	case err := <-served:
		if kind == "grpc" {
			served <- err // for the deferred Stop
		}
		return fmt.Errorf("server stopped: %w", err)
	}
	if kind != "grpc" {
		if err := <-served; err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("%s server: %w", kind, err)
		}
	}
	return nil
}

// ChildStats are a child's counters at one moment, all cumulative.
type ChildStats struct {
	Mallocs, TotalAlloc uint64        // runtime.MemStats
	CPU                 time.Duration // user + system, getrusage RUSAGE_SELF
	// Sent counts the commands an rpr or plain child sent to Redis (a script run
	// is one, whatever it runs inside), 0 for gRPC.
	Sent uint64
	// GCs counts the child's completed garbage collections.
	GCs uint64
}

// Child is a server child this process started (StartChild).
type Child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string   // the child's stdout, a line each
	done   chan struct{} // closed by Stop: the stdout reader gives up sending
	exited chan struct{} // closed once the process has exited and been reaped
	waited error         // how it exited (exec.Cmd.Wait's error), set before exited closes
	stderr *tail
	// Addr is what the child's ready line named: its gRPC listener's
	// address, "-" for a server on Redis.
	Addr string
	stop sync.Once
}

// StartChild starts this program's executable again as a server child of
// the given mode (see ChildEnv) and waits, at most 30s, until it serves.
// The caller must Stop it, on every path.
func StartChild(ctx context.Context, mode string) (*Child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this program to run it as a child: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	c := &Child{lines: make(chan string, 16), done: make(chan struct{}), exited: make(chan struct{}), stderr: &tail{max: 8192}}
	c.cmd = exec.Command(exe)
	c.cmd.Env = append(os.Environ(), ChildEnv+"="+mode)
	c.cmd.Stdout, c.cmd.Stderr = w, c.stderr
	DieWithParent(c.cmd)
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("starting %s as a %q child: %w", exe, mode, err)
	}
	w.Close() // the child holds its own copy: EOF on r once it exits
	go c.readStdout(r)
	line, err := c.next(ctx, 30*time.Second)
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("%q child did not start: %w", mode, err)
	}
	addr, ok := strings.CutPrefix(line, "ready ")
	if !ok {
		c.Stop()
		return nil, fmt.Errorf("%q child said %q, want \"ready <addr>\"", mode, line)
	}
	c.Addr = addr
	return c, nil
}

func (c *Child) readStdout(r *os.File) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		select {
		case c.lines <- sc.Text():
		case <-c.done: // stopping: nobody reads the lines any more
		}
	}
	c.waited = c.cmd.Wait()
	close(c.exited)
}

// Died describes how the child ended when it has exited without being
// stopped (a crash, a panic), waiting up to within for it to be reaped:
// its exit status and what it wrote to stderr. It is "" while the child
// runs, or once Stop ended it.
func (c *Child) Died(within time.Duration) string {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-c.exited:
	case <-t.C:
		return ""
	}
	select {
	case <-c.done:
		return "" // stopped
	default:
	}
	status := "exit status 0"
	if c.waited != nil {
		status = c.waited.Error()
	}
	return fmt.Sprintf("child %d exited (%s): %s", c.Pid(), status, c.stderr.String())
}

// next returns the child's next line of output, waiting at most bound.
func (c *Child) next(ctx context.Context, bound time.Duration) (string, error) {
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case l := <-c.lines:
		return l, nil
	case <-c.exited:
		return "", fmt.Errorf("child %d exited: %s", c.Pid(), c.stderr.String())
	case <-t.C:
		return "", fmt.Errorf("child %d said nothing within %v: %s", c.Pid(), bound, c.stderr.String())
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Stats asks the child for its counters and waits, at most 10s, for them.
func (c *Child) Stats(ctx context.Context) (ChildStats, error) {
	if _, err := io.WriteString(c.stdin, "stats\n"); err != nil {
		return ChildStats{}, fmt.Errorf("asking child %d for its stats: %w", c.Pid(), err)
	}
	line, err := c.next(ctx, 10*time.Second)
	if err != nil {
		return ChildStats{}, err
	}
	f := strings.Fields(line)
	if len(f) != 6 || f[0] != "stats" {
		return ChildStats{}, fmt.Errorf("child %d said %q, want \"stats <mallocs> <bytes> <cpu ns> <commands sent> <GCs>\"", c.Pid(), line)
	}
	var n [5]uint64
	for i := range n {
		if n[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return ChildStats{}, fmt.Errorf("child %d stats %q: %w", c.Pid(), line, err)
		}
	}
	return ChildStats{Mallocs: n[0], TotalAlloc: n[1], CPU: time.Duration(n[2]), Sent: n[3], GCs: n[4]}, nil
}

// Profile starts a CPU profile of the child into the file at path
// (StartProfile), until Unprofile.
func (c *Child) Profile(ctx context.Context, path string) error {
	return c.ask(ctx, "profile "+path)
}

// Unprofile ends the child's CPU profile and writes it out.
func (c *Child) Unprofile(ctx context.Context) error {
	return c.ask(ctx, "unprofile")
}

// ask sends the child a profiling command and reads its answer: the
// command's name and "<nil>", or the error.
func (c *Child) ask(ctx context.Context, command string) error {
	name, _, _ := strings.Cut(command, " ")
	if _, err := io.WriteString(c.stdin, command+"\n"); err != nil {
		return fmt.Errorf("asking child %d to %s: %w", c.Pid(), name, err)
	}
	line, err := c.next(ctx, 10*time.Second)
	if err != nil {
		return err
	}
	answer, ok := strings.CutPrefix(line, name+" ")
	if !ok {
		return fmt.Errorf("child %d said %q, want %q and its outcome", c.Pid(), line, name)
	}
	if answer != "<nil>" {
		return fmt.Errorf("child %d: %s: %s", c.Pid(), name, answer)
	}
	return nil
}

// Stop ends the child by its PID: its stdin closed and SIGTERM, then
// SIGKILL if it has not exited within 10s; it returns once the process is
// reaped. Safe to call more than once.
func (c *Child) Stop() {
	c.stop.Do(func() {
		close(c.done) // the reader drops further lines and reads on to EOF
		c.stdin.Close()
		Terminate(c.cmd.Process, c.exited, 10*time.Second)
	})
}

// tail keeps the first and the last max/2 bytes written to it: a child's
// stderr, quoted when the child fails. A Go panic says what it is first
// and which goroutine last; the traces between them can run to megabytes.
type tail struct {
	mu        sync.Mutex
	max       int
	head, end []byte
	cut       bool // bytes between head and end were dropped
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if room := t.max/2 - len(t.head); room > 0 && len(t.end) == 0 { // the head fills first
		take := min(room, len(p))
		t.head, p = append(t.head, p[:take]...), p[take:]
	}
	t.end = append(t.end, p...)
	if over := len(t.end) - t.max/2; over > 0 {
		t.end = append(t.end[:0], t.end[over:]...)
		t.cut = true
	}
	return n, nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.head)+len(t.end) == 0 {
		return "(no stderr)"
	}
	gap := ""
	if t.cut {
		gap = "\n[…]\n"
	}
	return strings.TrimSpace(string(t.head) + gap + string(t.end))
}
