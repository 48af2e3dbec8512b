package redistest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ours reports whether pid is alive and is a redis-server running in dir,
// the same check the shell recipes use (a zombie or recycled PID fails it).
func ours(pid int, dir string) bool {
	cwd, err := os.Readlink(filepath.Join("/proc", itoa(pid), "cwd"))
	return err == nil && cwd == dir
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestStartPingAndConfig(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	ctx := ctxT(t)
	rdb := srv.Client(t)

	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want v", got, err)
	}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := infoField(info, "process_id"); got != itoa(srv.PID()) {
		t.Fatalf("INFO process_id = %s, PID() = %d", got, srv.PID())
	}
	if !ours(srv.PID(), srv.Dir()) {
		t.Fatalf("pid %d does not run in %s", srv.PID(), srv.Dir())
	}
	if !strings.HasPrefix(srv.Addr(), "127.0.0.1:") || srv.URL() != "redis://"+srv.Addr()+"/0" {
		t.Fatalf("Addr %q URL %q", srv.Addr(), srv.URL())
	}
	if _, err := redis.ParseURL(srv.URL()); err != nil {
		t.Fatalf("URL %q does not parse: %v", srv.URL(), err)
	}
	for name, want := range map[string]string{"save": "", "appendonly": "no"} {
		got, err := rdb.ConfigGet(ctx, name).Result()
		if err != nil || got[name] != want {
			t.Errorf("CONFIG GET %s = %v, %v; want %q", name, got, err, want)
		}
	}
	// enable-debug-command yes: DEBUG SLEEP is what later fault tests use.
	if err := rdb.Do(ctx, "DEBUG", "SLEEP", "0").Err(); err != nil {
		t.Errorf("DEBUG SLEEP 0: %v", err)
	}
	if _, err := os.Stat(srv.LogPath()); err != nil {
		t.Errorf("log file: %v", err)
	}
}

func TestWithConfig(t *testing.T) {
	t.Parallel()
	srv := Start(t, WithConfig("maxmemory", "1mb"), WithConfig("maxmemory-policy", "noeviction"))
	got, err := srv.Client(t).ConfigGet(ctxT(t), "maxmemory").Result()
	if err != nil || got["maxmemory"] != "1048576" {
		t.Fatalf("CONFIG GET maxmemory = %v, %v; want 1048576", got, err)
	}
}

func TestParallelServersGetTheirOwnPorts(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 3 {
		srv := Start(t)
		if seen[srv.Addr()] {
			t.Fatalf("two servers on %s", srv.Addr())
		}
		seen[srv.Addr()] = true
		if err := srv.Client(t).Ping(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestKillRestartKeepsPortAndDir(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	ctx := ctxT(t)
	rdb := srv.Client(t)
	addr, dir, pid1 := srv.Addr(), srv.Dir(), srv.PID()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	srv.Kill()
	if srv.Running() || ours(pid1, dir) {
		t.Fatalf("pid %d still running after Kill", pid1)
	}
	probe := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	defer probe.Close()
	if err := probe.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded after Kill")
	}

	srv.Restart(t)
	if srv.Addr() != addr || srv.Dir() != dir {
		t.Fatalf("after Restart: %s in %s, want %s in %s", srv.Addr(), srv.Dir(), addr, dir)
	}
	if srv.PID() == pid1 || !ours(srv.PID(), dir) {
		t.Fatalf("after Restart: pid %d (was %d) not running in %s", srv.PID(), pid1, dir)
	}
	// The client made before the crash reconnects by itself.
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	// No persistence: the data is gone.
	if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Restart = %v, want redis.Nil (no persistence)", err)
	}

	// Restart of a running server stops it first.
	pid2 := srv.PID()
	srv.Restart(t)
	if srv.PID() == pid2 || ours(pid2, dir) {
		t.Fatalf("Restart of a running server left pid %d", pid2)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after second Restart: %v", err)
	}
}

func TestStopRemovesProcess(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	pid := srv.PID()
	start := time.Now()
	srv.Stop()
	if srv.Running() || ours(pid, srv.Dir()) {
		t.Fatalf("pid %d still running after Stop", pid)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Stop took %v; SIGTERM should be enough", d)
	}
	// The port is free again.
	l, err := net.Listen("tcp", srv.Addr())
	if err != nil {
		t.Fatalf("port not released after Stop: %v", err)
	}
	l.Close()
	srv.Stop() // idempotent
	srv.Kill() // no-op on a stopped server
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	ctx := ctxT(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered by a paused server")
	}
	srv.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("no PING answer 10s after Resume")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Stop must also end a paused server quickly (it sends SIGCONT too).
	srv.Pause()
	start := time.Now()
	srv.Stop()
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Stop of a paused server took %v", d)
	}
}

// A port somebody else holds is reported as errPortInUse, which Start
// answers by trying another port, and the failed process is reaped.
func TestPortTakenIsDetected(t *testing.T) {
	t.Parallel()
	bin, err := findRedisServer()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // answer nothing, so the readiness poll fails fast
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	s := &Server{bin: bin, dir: t.TempDir(), port: l.Addr().(*net.TCPAddr).Port,
		cfg: config{startTimeout: DefaultStartTimeout}}
	err = s.start()
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("start on a taken port: %v, want errPortInUse", err)
	}
	if s.Running() {
		t.Fatal("failed start left the process running")
	}
}

func TestMissingRedisServerFailsWithHint(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(EnvRedisServer, "")
	_, err := findRedisServer()
	if err == nil || !strings.Contains(err.Error(), "make test") || !strings.Contains(err.Error(), "apt-get install redis-server") {
		t.Fatalf("findRedisServer with an empty PATH: %v", err)
	}
}
