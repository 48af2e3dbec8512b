package tunnel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/tunnel"
)

// What the streaming tests share: a Redis with servers and clients that
// each have connections of their own, optionally through a cuttable TCP
// proxy (a process that can no longer reach Redis, without killing it),
// and the names of a stream's keys as an operator sees them.

// streamWorld is one streaming test's Redis and the connection the test
// inspects it with.
type streamWorld struct {
	t     *testing.T
	redis *redistest.Server
	rdb   *redis.Client
	keys  store.Keyspace
}

func newStreamWorld(t *testing.T, opts ...redistest.Option) *streamWorld {
	t.Helper()
	rs := redistest.Start(t, opts...)
	return &streamWorld{t: t, redis: rs, rdb: rs.Client(t), keys: store.NewKeyspace("")}
}

// conn returns a Redis client of its own, straight or through p.
func (w *streamWorld) conn(p *cutProxy) *redis.Client {
	w.t.Helper()
	addr := w.redis.Addr()
	if p != nil {
		addr = p.addr()
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	w.t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// serve starts a server with its own connections (through p when not nil)
// and register's services; it returns the server and a stop function
// (also run at cleanup).
func (w *streamWorld) serve(p *cutProxy, opts tunnel.ServerOptions, register func(*tunnel.Server)) (*tunnel.Server, func()) {
	w.t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return startServer(w.t, w.conn(p), opts, register)
}

// client makes a client with its own connections (through p when not nil).
func (w *streamWorld) client(p *cutProxy, opts tunnel.ClientOptions) *tunnel.Client {
	w.t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := tunnel.NewClient(w.conn(p), opts)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = c.Close() })
	return c
}

// pttl returns key's remaining time to live: -2ms for a missing key,
// -1ms for a key without expiry.
func (w *streamWorld) pttl(key string) time.Duration {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := w.rdb.PTTL(ctx, key).Result()
	if err != nil {
		w.t.Fatalf("PTTL %s: %v", key, err)
	}
	return d
}

// cutProxy forwards TCP connections to Redis until cut: then it closes
// every connection and refuses new ones, as a network partition does to
// the process behind it, until restored.
type cutProxy struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		p.wg.Go(func() { pipe(up, c) })
		p.wg.Go(func() { pipe(c, up) })
	}
}

// cutOff closes every connection and refuses new ones until restore.
func (p *cutProxy) cutOff() {
	p.mu.Lock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
}

// restore lets connections through again.
func (p *cutProxy) restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

func (p *cutProxy) close() {
	_ = p.ln.Close()
	p.cutOff()
	p.wg.Wait()
}

// within waits for ch until timeout, a bound on a hang; it reports whether
// ch was closed or sent on in time.
func within[T any](ch <-chan T, timeout time.Duration) (T, bool) {
	select {
	case v := <-ch:
		return v, true
	case <-time.After(timeout):
		var zero T
		return zero, false
	}
}

// isEOF reports whether err is the clean end of a stream.
func isEOF(err error) bool { return errors.Is(err, io.EOF) }
