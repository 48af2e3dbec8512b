package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults; see the Options to change them per server.
const (
	// DefaultStartTimeout bounds how long Start waits for the server to
	// answer INFO with its own process id. Generous because CI runs tests
	// under -race on two busy cores.
	DefaultStartTimeout = 20 * time.Second
	// stopGrace is how long Stop waits after SIGTERM before SIGKILL.
	stopGrace = 5 * time.Second
	// portAttempts is how often Start retries after losing a port race.
	portAttempts = 5
)

// EnvRedisServer names an environment variable that, when set, replaces the
// redis-server found on PATH.
const EnvRedisServer = "RPR_REDIS_SERVER"

// Option changes how Start configures a server.
type Option func(*config)

type config struct {
	directives   [][2]string // extra redis.conf lines, in order
	startTimeout time.Duration
	tls          *tlsSetup // WithTLS; nil without
}

// WithConfig adds a redis.conf directive, written after the defaults so it
// overrides them, e.g. WithConfig("maxmemory", "1mb") or
// WithConfig("appendonly", "yes") for a test that wants data to survive
// Restart. The value is written as is (quote it yourself if needed).
func WithConfig(name, value string) Option {
	return func(c *config) { c.directives = append(c.directives, [2]string{name, value}) }
}

// WithStartTimeout changes how long Start and Restart wait for readiness.
func WithStartTimeout(d time.Duration) Option {
	return func(c *config) { c.startTimeout = d }
}

// Server is one redis-server process started by this package. Its methods
// are safe for concurrent use.
type Server struct {
	bin  string
	dir  string
	port int
	// tlsPort is the TLS port of a server started WithTLS, else 0.
	tlsPort int
	cfg     config

	mu   sync.Mutex
	proc *process // current process; nil before the first start
}

// process is one run of redis-server; Restart creates a new one.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // Wait's result, valid after done
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Start starts a redis-server on a free 127.0.0.1 port and waits until it
// answers. It registers a cleanup that stops the server (SIGTERM, SIGKILL
// after 5 s) and, if the test failed, logs the end of the server's log.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	cfg := config{startTimeout: DefaultStartTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	bin, err := findRedisServer()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	s := &Server{bin: bin, dir: tb.TempDir(), cfg: cfg}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("redistest: end of %s:\n%s", s.LogPath(), s.logTail(20))
		}
		s.Stop()
	})

	if err := startFreePort(s, s.start); err != nil {
		tb.Fatalf("redistest: starting redis-server: %v", err)
	}
	return s
}

// startFreePort runs start with s on a free port from the kernel, and again
// on another one after losing a port race.
func startFreePort(s *Server, start func() error) error {
	var lastErr error
	for range portAttempts {
		port, err := freePort()
		if err != nil {
			return fmt.Errorf("finding a free port: %w", err)
		}
		s.port = port
		if s.cfg.tls != nil {
			if s.tlsPort, err = freePort(); err != nil {
				return fmt.Errorf("finding a free port: %w", err)
			}
			if s.tlsPort == port {
				continue
			}
		}
		if lastErr = start(); lastErr == nil || !errors.Is(lastErr, errPortInUse) {
			return lastErr
		}
	}
	return lastErr
}

func findRedisServer() (string, error) {
	if p := os.Getenv(EnvRedisServer); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redis-server not found on PATH; the tests need a real Redis: " +
			"run `make test` (it installs one via scripts/ensure-redis.sh) " +
			"or `apt-get install redis-server`")
	}
	return p, nil
}

// freePort asks the kernel for a free port. Another process may take it
// before redis-server binds it; start reports that as errPortInUse.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

var errPortInUse = errors.New("port already in use")

const confName = "redis.conf"
const logName = "redis.log"

func (s *Server) writeConfig() error {
	var b strings.Builder
	fmt.Fprintf(&b, "# written by internal/redistest\n")
	fmt.Fprintf(&b, "port %d\nbind 127.0.0.1\n", s.port)
	fmt.Fprintf(&b, "dir %s\n", s.dir)
	b.WriteString("daemonize no\n")
	b.WriteString("logfile \"\"\n") // stdout, which start points at redis.log
	b.WriteString("save \"\"\nappendonly no\n")
	// DEBUG SLEEP for fault tests; immutable, so it must be set at start-up.
	b.WriteString("enable-debug-command yes\n")
	ds := s.cfg.directives
	if s.cfg.tls != nil && s.tlsPort != 0 {
		ds = append(s.cfg.tls.directives(s.tlsPort), ds...)
	}
	for _, d := range ds {
		fmt.Fprintf(&b, "%s %s\n", d[0], d[1])
	}
	return os.WriteFile(filepath.Join(s.dir, confName), []byte(b.String()), 0o644)
}

// start writes redis.conf and runs redis-server once on s.port, waiting for
// readiness. On failure the process is gone again when start returns.
func (s *Server) start() error {
	if err := s.writeConfig(); err != nil {
		return err
	}
	return s.run(confName)
}

// run starts redis-server on the config file conf in s.dir, with args after
// it (e.g. --sentinel), and waits for readiness. On failure the process is
// gone again when run returns.
func (s *Server) run(conf string, args ...string) error {
	logf, err := os.OpenFile(s.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	logStart, _ := logf.Seek(0, io.SeekEnd) // only this run's part of the log matters below
	cmd := exec.Command(s.bin, append([]string{filepath.Join(s.dir, conf)}, args...)...)
	cmd.Dir = s.dir
	// An *os.File, not a pipe: exec hands the descriptor to the child and
	// starts no copying goroutine, so Wait does not depend on the log.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return fmt.Errorf("running %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()

	if err := s.waitReady(p, logStart); err != nil {
		s.terminate(p)
		return err
	}
	return nil
}

// waitReady polls INFO server until it reports our PID. PONG alone is not
// enough: after losing a port race, another server would answer it.
func (s *Server) waitReady(p *process, logStart int64) error {
	deadline := time.Now().Add(s.cfg.startTimeout)
	want := strconv.Itoa(p.cmd.Process.Pid)
	var lastErr error
	for {
		if p.exited() {
			out := s.logSince(logStart)
			if strings.Contains(out, "Address already in use") {
				return fmt.Errorf("%w: 127.0.0.1:%d", errPortInUse, s.port)
			}
			return fmt.Errorf("redis-server exited (%v); its log %s says:\n%s", p.err, s.LogPath(), tail(out, 10))
		}
		info, err := infoServer(s.Addr())
		switch got := infoField(info, "process_id"); {
		case err != nil:
			lastErr = err
		case got == want:
			return nil
		default:
			lastErr = fmt.Errorf("127.0.0.1:%d is answered by process %s, not ours (%s)", s.port, got, want)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server (pid %s) not ready after %v: %v; its log %s says:\n%s",
				want, s.cfg.startTimeout, lastErr, s.LogPath(), s.logTail(10))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// infoServer sends INFO server over a fresh connection and returns the
// reply. It speaks RESP by hand rather than through commands (go-redis):
// in a readiness poll a refused dial is the normal case, and go-redis
// reports every failed dial through its process-wide logger, which would
// put a line per poll round in every test's output.
func infoServer(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	head = strings.TrimRight(head, "\r\n")
	if !strings.HasPrefix(head, "$") {
		return "", fmt.Errorf("INFO server: unexpected reply %q", head)
	}
	n, err := strconv.Atoi(head[1:])
	if err != nil || n < 0 {
		return "", fmt.Errorf("INFO server: unexpected reply %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	return string(body), nil
}

// infoField returns the value of "name:value" in an INFO reply.
func infoField(info, name string) string {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// terminate stops p: SIGCONT (in case it is paused) and SIGTERM, then
// SIGKILL after stopGrace. It returns once p has been reaped. Signals go
// through p's own os.Process handle, so an exited (or recycled) PID is never
// signalled.
func (s *Server) terminate(p *process) {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.done:
		return
	case <-time.After(stopGrace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (s *Server) current() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// Addr returns "127.0.0.1:PORT". The port stays the same across Restart.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the TCP port.
func (s *Server) Port() int { return s.port }

// URL returns "redis://127.0.0.1:PORT/0", the form tunnel.Open accepts.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Dir returns the server's working directory (its config and log live there).
func (s *Server) Dir() string { return s.dir }

// LogPath returns the file that receives the server's stdout and stderr.
func (s *Server) LogPath() string { return filepath.Join(s.dir, logName) }

// PID returns the process id of the current run (it changes on Restart), or
// 0 if the server was never started.
func (s *Server) PID() int {
	if p := s.current(); p != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// Running reports whether the current process has not exited yet. A
// paused (SIGSTOPped) server is running.
func (s *Server) Running() bool {
	p := s.current()
	return p != nil && !p.exited()
}

// Client returns a new go-redis client for the server, closed when tb ends.
// It uses go-redis defaults apart from the address, so it reconnects by
// itself after Restart.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Stop shuts the server down cleanly (SIGTERM, then SIGKILL after 5 s) and
// waits until the process is gone. Stopping a stopped server does nothing.
func (s *Server) Stop() { s.terminate(s.current()) }

// Kill sends SIGKILL, a crash with no chance to clean up, and waits until the
// process is gone.
func (s *Server) Kill() {
	p := s.current()
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		// SIGKILL cannot be caught; this only happens if the kernel is stuck.
		panic(fmt.Sprintf("redistest: redis-server pid %d still there 10s after SIGKILL", p.cmd.Process.Pid))
	}
}

// Pause freezes the server with SIGSTOP: connections stay open but nothing is
// answered, as with a hung host. Resume (or Stop) undoes it.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a server frozen by Pause.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig os.Signal) {
	if p := s.current(); p != nil && !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Restart starts the server again on the same port and in the same
// directory, stopping it first (SIGTERM) if it is still running. Its data
// is gone unless the test turned persistence on with WithConfig. The PID
// changes. It fails tb if the port has been taken in the meantime.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Stop()
	var err error
	// The old process' port can linger briefly; retry only that case.
	for attempt := 0; attempt < portAttempts; attempt++ {
		if err = s.start(); err == nil || !errors.Is(err, errPortInUse) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		tb.Fatalf("redistest: restarting redis-server on %s: %v", s.Addr(), err)
	}
}

func (s *Server) logSince(off int64) string {
	b, err := os.ReadFile(s.LogPath())
	if err != nil || off > int64(len(b)) {
		return ""
	}
	return string(b[off:])
}

func (s *Server) logTail(n int) string { return tail(s.logSince(0), n) }

func tail(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
