// Package e2e holds end-to-end tests that run the project's programs the way
// users deploy them.
//
// TestTwoNetworks is the proof of rpr's reason to exist: two networks that
// cannot reach each other, both reaching one Redis, and gRPC-style calls
// flowing from one to the other through it. It builds the example greeter
// server and client, builds three network namespaces with
// scripts/netns-sites.sh (siteA, siteB, and a hub running redis-server),
// shows that siteA cannot open a TCP connection into siteB while both reach
// the hub's Redis, then runs the server in siteB and 1000 calls from the
// client in siteA.
//
// It needs root (network namespaces) and iproute2, and skips without them.
// It never touches a namespace it did not create: the names carry this
// process' PID. Set RPR_E2E_GREETER_SERVER and RPR_E2E_GREETER_CLIENT to
// prebuilt binaries to skip the build.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// servingMarker is what greeter-server prints on stderr once it serves.
	servingMarker = "serving examples.greeter.v1.Greeter"

	calls       = 1000
	concurrency = 16

	// A port for the throwaway listener in siteB (inside our own namespace,
	// so it cannot clash with anything on the host).
	siteBListenPort = 17777

	envServerBin = "RPR_E2E_GREETER_SERVER"
	envClientBin = "RPR_E2E_GREETER_CLIENT"

	// The test binary doubles as a tiny TCP tool run inside the namespaces
	// (no nc or ping needed): see runHelper.
	envHelper     = "RPR_E2E_HELPER"
	envHelperAddr = "RPR_E2E_HELPER_ADDR"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envHelper); mode != "" {
		os.Exit(runHelper(mode, os.Getenv(envHelperAddr)))
	}
	os.Exit(m.Run())
}

func TestTwoNetworks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("two-network test skipped: it needs root to create network namespaces (run as root, e.g. in CI via .ci/run)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("two-network test skipped: `ip` (iproute2) not found; apt-get install iproute2")
	}
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found on PATH: run `make test` (it installs Redis via scripts/ensure-redis.sh) or `apt-get install redis-server redis-tools`", bin)
		}
	}

	// One deadline bounds every wait below, well inside `go test -timeout`.
	deadline := time.Now().Add(9 * time.Minute)
	if d, ok := t.Deadline(); ok && d.Add(-30*time.Second).Before(deadline) {
		deadline = d.Add(-30 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	root := repoRoot(t)
	t0 := time.Now()
	serverBin, clientBin := greeterBinaries(ctx, t, root)
	t.Logf("greeter binaries ready in %v", time.Since(t0).Round(time.Millisecond))

	t0 = time.Now()
	topo := upTopology(ctx, t, root)
	t.Logf("topology up and checked in %v: %s and %s reach redis in %s", time.Since(t0).Round(time.Millisecond), topo.nsA, topo.nsB, topo.nsHub)

	t.Run("isolation", func(t *testing.T) {
		t0 := time.Now()
		checkIsolation(ctx, t, topo)
		t.Logf("isolation proven in %v", time.Since(t0).Round(time.Millisecond))
	})
	if t.Failed() {
		t.FailNow() // a greeter run between connected sites would prove nothing
	}

	t.Run("greeter", func(t *testing.T) {
		runGreeter(ctx, t, topo, serverBin, clientBin)
	})
}

// repoRoot finds the module root: `go env GOMOD` from the package dir, or
// this file's location.
func repoRoot(t *testing.T) string {
	t.Helper()
	if out, err := exec.Command(goTool(), "env", "GOMOD").Output(); err == nil {
		if mod := strings.TrimSpace(string(out)); mod != "" && mod != os.DevNull {
			return filepath.Dir(mod)
		}
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot find the repository root")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// goTool is the go command that runs this test: `go test` puts its own
// GOROOT/bin first on the test's PATH.
func goTool() string { return "go" }

// greeterBinaries builds examples/greeter/{server,client}, unless the
// environment names prebuilt ones.
func greeterBinaries(ctx context.Context, t *testing.T, root string) (server, client string) {
	t.Helper()
	server, client = os.Getenv(envServerBin), os.Getenv(envClientBin)
	if server != "" || client != "" {
		if server == "" || client == "" {
			t.Fatalf("set both %s and %s, or neither", envServerBin, envClientBin)
		}
		t.Logf("using prebuilt %s and %s", server, client)
		return server, client
	}
	dir := t.TempDir()
	build := func(pkg, out string) {
		bctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(bctx, goTool(), "build", "-o", out, pkg)
		cmd.Dir = root
		cmd.WaitDelay = 5 * time.Second
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s failed: %v\n%s\n"+
				"This test runs the example greeter server and client (examples/greeter/server and "+
				"examples/greeter/client); they must build.", pkg, err, b)
		}
	}
	server, client = filepath.Join(dir, "greeter-server"), filepath.Join(dir, "greeter-client")
	build("./examples/greeter/server", server)
	build("./examples/greeter/client", client)
	return server, client
}

// topology is what scripts/netns-sites.sh up printed.
type topology struct {
	env                map[string]string
	nsA, nsB, nsHub    string
	urlA, urlB         string // redis URLs for siteA / siteB
	siteBIP, hubVIP    string
	hubSideA, hubSideB string // hub redis addresses on siteA's / siteB's link
}

func upTopology(ctx context.Context, t *testing.T, root string) *topology {
	t.Helper()
	script := filepath.Join(root, "scripts", "netns-sites.sh")
	pid := os.Getpid()
	env := append(os.Environ(),
		"RPR_STATE_DIR="+filepath.Join(t.TempDir(), "netns"),
		fmt.Sprintf("NS_A=rprA%d", pid),
		fmt.Sprintf("NS_B=rprB%d", pid),
		fmt.Sprintf("NS_HUB=rprH%d", pid),
	)
	run := func(ctx context.Context, timeout time.Duration, args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, script, args...)
		cmd.Env = env
		cmd.WaitDelay = 5 * time.Second
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}

	// Registered before `up`, so a half-built topology is torn down too.
	// `down` only deletes the namespaces listed in our own state dir.
	t.Cleanup(func() {
		// Not ctx: teardown must run even when the test ran out of time.
		out, errOut, err := run(context.Background(), 90*time.Second, "down")
		if err != nil {
			t.Errorf("netns-sites.sh down: %v\n%s%s", err, out, errOut)
		}
		for _, ns := range []string{"rprA", "rprB", "rprH"} {
			name := fmt.Sprintf("%s%d", ns, pid)
			if _, err := os.Stat(filepath.Join("/run/netns", name)); err == nil {
				t.Errorf("namespace %s still exists after down", name)
			}
		}
	})

	out, errOut, err := run(ctx, 2*time.Minute, "up")
	if err != nil {
		t.Fatalf("netns-sites.sh up: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	kv := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			kv[k] = v
		}
	}
	topo := &topology{env: kv, nsA: kv["NS_A"], nsB: kv["NS_B"], nsHub: kv["NS_HUB"],
		urlA: kv["REDIS_URL_SITE_A"], urlB: kv["REDIS_URL_SITE_B"],
		siteBIP: kv["SITE_B_IP"], hubVIP: kv["REDIS_ADDR_VIP"],
		hubSideA: kv["REDIS_ADDR_SITE_A"], hubSideB: kv["REDIS_ADDR_SITE_B"]}
	for k, v := range map[string]string{"NS_A": topo.nsA, "NS_B": topo.nsB, "NS_HUB": topo.nsHub,
		"REDIS_URL_SITE_A": topo.urlA, "REDIS_URL_SITE_B": topo.urlB, "SITE_B_IP": topo.siteBIP,
		"REDIS_ADDR_SITE_A": topo.hubSideA, "REDIS_ADDR_SITE_B": topo.hubSideB} {
		if v == "" {
			t.Fatalf("netns-sites.sh up did not print %s; it printed:\n%s", k, out)
		}
	}

	// The script's own check, so CI guards the script users run by hand.
	cout, cerr, err := run(ctx, time.Minute, "check")
	if err != nil {
		t.Fatalf("netns-sites.sh check: %v\n%s%s", err, cout, cerr)
	}
	t.Logf("netns-sites.sh check:\n%s", cout)
	return topo
}

// inNS returns a command that runs args inside namespace ns.
func inNS(ctx context.Context, ns string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...)
	// `ip netns exec` execs in place, so cmd.Process is the program itself.
	// It dies with the test binary even if no cleanup gets to run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

type syncBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	seen   chan struct{}
	once   sync.Once
}

func newSyncBuffer(marker string) *syncBuffer {
	return &syncBuffer{marker: marker, seen: make(chan struct{})}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if b.marker != "" && bytes.Contains(b.buf.Bytes(), []byte(b.marker)) {
		b.once.Do(func() { close(b.seen) })
	}
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func runGreeter(ctx context.Context, t *testing.T, topo *topology, serverBin, clientBin string) {
	before := hubCommands(ctx, t, topo)

	// The server in siteB, with siteB's address of the hub.
	server := inNS(context.Background(), topo.nsB, serverBin, "--redis", topo.urlB)
	serverOut := newSyncBuffer(servingMarker)
	server.Stdout, server.Stderr = serverOut, serverOut
	if err := server.Start(); err != nil {
		t.Fatalf("starting greeter-server in %s: %v", topo.nsB, err)
	}
	serverDone := make(chan error, 1)
	go func() { serverDone <- server.Wait() }()
	var serverExit error
	serverExited := false
	t.Cleanup(func() {
		// Stop our server by its own process handle: SIGTERM, SIGKILL after 15 s.
		if !serverExited {
			_ = server.Process.Signal(syscall.SIGTERM)
			select {
			case serverExit = <-serverDone:
			case <-time.After(15 * time.Second):
				t.Errorf("greeter-server did not exit within 15s of SIGTERM; killing it")
				_ = server.Process.Kill()
				serverExit = <-serverDone
			}
		}
		t.Logf("greeter-server exited: %v", serverExit)
		if t.Failed() {
			t.Logf("greeter-server output:\n%s", tailLines(serverOut.String(), 60))
		}
	})
	t0 := time.Now()
	select {
	case <-serverOut.seen:
		t.Logf("greeter-server serving in %s after %v", topo.nsB, time.Since(t0).Round(time.Millisecond))
	case serverExit = <-serverDone:
		serverExited = true
		t.Fatalf("greeter-server exited before serving: %v\n%s", serverExit, serverOut.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("greeter-server did not print %q within 60s", servingMarker)
	case <-ctx.Done():
		t.Fatalf("out of time waiting for greeter-server: %v", ctx.Err())
	}

	// The client in siteA, with siteA's address of the hub.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	client := inNS(cctx, topo.nsA, clientBin, "--redis", topo.urlA, "--name", "e2e",
		"--count", strconv.Itoa(calls), "--concurrency", strconv.Itoa(concurrency))
	var stdout, stderr bytes.Buffer
	client.Stdout, client.Stderr = &stdout, &stderr
	t0 = time.Now()
	err := client.Run()
	elapsed := time.Since(t0)
	want := fmt.Sprintf("calls=%d ok=%d failed=0", calls, calls)
	if err != nil {
		if cctx.Err() != nil {
			err = fmt.Errorf("%w (killed after %v: %v)", err, elapsed.Round(time.Millisecond), cctx.Err())
		}
		t.Errorf("greeter-client in %s failed: %v\nstdout:\n%s\nstderr:\n%s", topo.nsA, err, tailLines(stdout.String(), 20), tailLines(stderr.String(), 40))
	}
	if !hasLine(stdout.String(), want) {
		t.Errorf("greeter-client did not print %q; stdout:\n%s\nstderr:\n%s", want, tailLines(stdout.String(), 20), tailLines(stderr.String(), 40))
	}
	if !t.Failed() {
		t.Logf("greeter-client in %s: %d calls (concurrency %d) through %s in %v (%.0f calls/s)",
			topo.nsA, calls, concurrency, topo.nsHub, elapsed.Round(time.Millisecond), float64(calls)/elapsed.Seconds())
	}

	select {
	case serverExit = <-serverDone:
		serverExited = true
		t.Errorf("greeter-server exited during the run: %v", serverExit)
	default:
	}
	if after := hubCommands(ctx, t, topo); before >= 0 && after >= 0 {
		t.Logf("hub redis processed %d commands during the run (%.1f per call, including the server's polling)",
			after-before, float64(after-before)/calls)
	}
}

// hubCommands reads total_commands_processed of the hub redis, from inside
// the hub; -1 if that fails (only logged: it is not what the test asserts).
func hubCommands(ctx context.Context, t *testing.T, topo *topology) int64 {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	port := topo.env["REDIS_PORT"]
	if port == "" {
		port = "6379"
	}
	out, err := inNS(ctx, topo.nsHub, "redis-cli", "-h", "127.0.0.1", "-p", port, "info", "stats").Output()
	if err != nil {
		t.Logf("reading hub redis stats: %v", err)
		return -1
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

func hasLine(out, want string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == want {
			return true
		}
	}
	return false
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
