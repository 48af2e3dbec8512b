package compare

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redisinfo"
)

// RedisServer is a throwaway redis-server this program started: a free
// loopback port, its own temporary directory, no persistence.
type RedisServer struct {
	cmd     *exec.Cmd
	dir     string
	addr    string
	Version string        // redis_version, from INFO server
	exited  chan struct{} // closed once the process has exited and been reaped
}

// StartRedis starts redis-server and waits until it answers: bin when not
// empty, else $RPR_REDIS_SERVER, else the one on PATH.
func StartRedis(bin string) (*RedisServer, error) {
	if bin == "" {
		bin = os.Getenv("RPR_REDIS_SERVER")
	}
	if bin == "" {
		p, err := exec.LookPath("redis-server")
		if err != nil {
			return nil, errors.New("redis-server not found on PATH: install it (apt-get install redis-server) or name it with -redis-server or $RPR_REDIS_SERVER")
		}
		bin = p
	}
	dir, err := os.MkdirTemp("", "grpccompare-redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 { // another process may take the free port first
		s, err := startRedisOnce(bin, dir)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("starting %s: %w (log: %s)", bin, lastErr, filepath.Join(dir, "redis.log"))
}

func startRedisOnce(bin, dir string) (*RedisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &RedisServer{dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), exited: make(chan struct{})}
	s.cmd = exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"),
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	DieWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer rdb.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		select {
		case <-s.exited:
			return nil, errors.New("redis-server exited at start (port taken?)")
		default:
		}
		if info, err := rdb.Info(context.Background(), "server").Result(); err == nil {
			s.Version = redisinfo.Field(info, "redis_version")
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, errors.New("redis-server did not answer within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// URL is the server's redis:// URL.
func (s *RedisServer) URL() string { return "redis://" + s.addr + "/0" }

// Stop ends the process this program started, through its own handle
// (SIGTERM, SIGKILL after 5s), reaps it and removes its directory.
func (s *RedisServer) Stop() {
	Terminate(s.cmd.Process, s.exited, 5*time.Second)
	os.RemoveAll(s.dir)
}

// Terminate ends a process this program started, through its own handle:
// SIGTERM, then SIGKILL if it has not exited after grace. exited is closed
// once the process has been reaped; Terminate returns after that, and at
// once when it already is.
func Terminate(p *os.Process, exited <-chan struct{}, grace time.Duration) {
	select {
	case <-exited:
		return
	default:
	}
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = p.Kill()
		<-exited
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
