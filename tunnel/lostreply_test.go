package tunnel_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// A write that adds a request reaches Redis, which runs it, and its reply
// is lost with the connection (Redis killed right after, the network cut):
// go-redis must not send it again (a second copy would run a call twice),
// and the caller must not be told it was not sent (the failover test saw
// "not sent: safe to retry" for a call that ran, after go-redis's resend
// found Redis gone and reported the failed dial).

// lostReplyModes are what the client can do after the reply is lost:
// reconnect at once, or nothing until the proxy listens again.
var lostReplyModes = []struct {
	name string
	cut  bool
}{{"reconnects", false}, {"cut off", true}}

// TestLostReplyUnary: a unary call whose XADD's reply is lost runs once,
// and its error says it may have run, whether the client can reconnect
// at once (then a resend would have added the request again) or not at
// all (then a resend's failed dial would have read as "not sent").
func TestLostReplyUnary(t *testing.T) {
	for _, mode := range lostReplyModes {
		cut := mode.cut
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			rs := redistest.Start(t)
			var mu sync.Mutex
			runs := map[string]int{}
			// The marked request's handler answers only once the call has
			// returned: otherwise its answer, which reaches the client on
			// another connection, may come before the lost reply's error
			// and the call succeeds, as it rightly may.
			answer := make(chan struct{})
			impl := map[string]echoHandler{"Echo": func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				mu.Lock()
				runs[in.GetValue()]++
				mu.Unlock()
				if in.GetValue() == "lost-reply-unary" {
					select {
					case <-answer:
					case <-ctx.Done():
					}
				}
				return in, nil
			}}
			ran := func(v string) int { mu.Lock(); defer mu.Unlock(); return runs[v] }
			startServer(t, rs.Client(t), tunnel.ServerOptions{Concurrency: 1, Logger: slog.New(slog.DiscardHandler)},
				func(s *tunnel.Server) { s.RegisterService(&echoDesc, impl) })

			p := newReplyDropper(t, rs.Addr())
			client := replyDropperClient(t, p)
			ctx := context.Background()
			m := method("Echo")
			waitFor(t, "the server to answer", func() bool {
				return client.Invoke(ctx, m, wrapperspb.String("warm"), new(wrapperspb.StringValue)) == nil
			})

			p.arm("lost-reply-unary", cut)
			err := client.Invoke(ctx, m, wrapperspb.String("lost-reply-unary"), new(wrapperspb.StringValue))
			close(answer)
			if !p.fired() {
				t.Fatalf("the proxy never saw the request; the call returned %v", err)
			}
			if err == nil || tunnel.NotExecuted(err) {
				t.Errorf("a call whose request reached Redis and whose reply was lost returned %v; want an error that says it may have run", err)
			} else {
				t.Logf("the call's error: %v", err)
			}
			waitFor(t, "the request to run", func() bool { return ran("lost-reply-unary") > 0 })
			if cut {
				p.restore(t)
			}
			// The server runs one request at a time, in the stream's order: a
			// copy added by a resend, which happens before the call returns,
			// runs before this one is answered.
			waitFor(t, "a call after it to be answered", func() bool {
				return client.Invoke(ctx, m, wrapperspb.String("after"), new(wrapperspb.StringValue)) == nil
			})
			if n := ran("lost-reply-unary"); n != 1 {
				t.Fatalf("the request ran %d times, want once", n)
			}
		})
	}
}

// TestLostReplyEnqueue: the same for an async request's enqueue.
func TestLostReplyEnqueue(t *testing.T) {
	for _, mode := range lostReplyModes {
		cut := mode.cut
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			w := newAsyncWorld(t, tunnel.ClientOptions{})
			w.serve(tunnel.ServerOptions{Concurrency: 1})
			p := newReplyDropper(t, w.redis.Addr())
			client := replyDropperClient(t, p)
			ctx := context.Background()
			m := jobsMethod("Do")
			if _, err := client.Enqueue(ctx, m, wrapperspb.String("warm")); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the first request to run", func() bool { return w.jobs.count("warm") == 1 })

			p.arm("lost-reply-enqueue", cut)
			_, err := client.Enqueue(ctx, m, wrapperspb.String("lost-reply-enqueue"))
			if !p.fired() {
				t.Fatalf("the proxy never saw the request; the enqueue returned %v", err)
			}
			if err == nil || tunnel.NotExecuted(err) {
				t.Errorf("an enqueue that reached Redis and whose reply was lost returned %v; want an error that says it may have been queued", err)
			} else {
				t.Logf("the enqueue's error: %v", err)
			}
			if cut {
				p.restore(t)
			}
			if _, err := client.Enqueue(ctx, m, wrapperspb.String("after")); err != nil {
				t.Fatal(err)
			}
			// One at a time, in the stream's order (see TestLostReplyUnary).
			waitFor(t, "the request after it to run", func() bool { return w.jobs.count("after") == 1 })
			if n := w.jobs.count("lost-reply-enqueue"); n != 1 {
				t.Fatalf("the request ran %d times, want once", n)
			}
		})
	}
}

// replyDropperClient returns a client whose connections go through p.
// Its circuit breaker is off, so that the lost reply's failure does not
// refuse the calls after it.
func replyDropperClient(t *testing.T, p *replyDropper) *tunnel.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: p.addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Breaker: tunnel.BreakerOptions{Disabled: true}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// replyDropper forwards TCP connections to Redis. Armed with a marker, it
// lets the first command that carries the marker reach Redis, drops
// Redis's reply to it and closes that connection, as a Redis that dies
// right after running a command does to the client that sent it. With
// cut, it also closes every other connection and its listener, so that
// dials are refused until restore listens again, as a dead Redis does.
type replyDropper struct {
	target  string
	address string
	wg      sync.WaitGroup

	mu     sync.Mutex
	ln     net.Listener // nil while cut off
	marker []byte
	cut    bool // what arm asked for
	hit    bool // the marker was seen
	conns  map[*droppedConn]struct{}
}

// droppedConn is one forwarded connection; doomed is set when it carried
// the marker, so that the next reply on it is dropped.
type droppedConn struct {
	client, redis net.Conn
	doomed        bool
}

func newReplyDropper(t *testing.T, target string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{target: target, address: ln.Addr().String(), ln: ln, conns: map[*droppedConn]struct{}{}}
	p.wg.Go(func() { p.accept(ln) })
	t.Cleanup(func() {
		p.mu.Lock()
		p.cutAll()
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *replyDropper) addr() string { return p.address }

// cutAll closes the listener and every connection; p.mu is held.
func (p *replyDropper) cutAll() {
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.close()
	}
}

// arm makes the next command that carries marker the one whose reply is
// dropped.
func (p *replyDropper) arm(marker string, cut bool) {
	p.mu.Lock()
	p.marker, p.cut = []byte(marker), cut
	p.mu.Unlock()
}

// fired reports whether the marker was seen.
func (p *replyDropper) fired() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hit
}

// restore listens again, on the same address, after a cut.
func (p *replyDropper) restore(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.address)
	if err != nil {
		t.Fatalf("listen again on %s: %v", p.address, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() { p.accept(ln) })
}

func (p *replyDropper) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		dc := &droppedConn{client: c, redis: up}
		p.mu.Lock()
		p.conns[dc] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.toRedis(dc) })
		p.wg.Go(func() { p.toClient(dc) })
	}
}

// toRedis copies what the client writes to Redis, watching for the marker.
func (p *replyDropper) toRedis(dc *droppedConn) {
	defer p.forget(dc)
	buf := make([]byte, 64<<10)
	for {
		n, err := dc.client.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if p.marker != nil && bytes.Contains(buf[:n], p.marker) {
				p.marker, p.hit, dc.doomed = nil, true, true
			}
			p.mu.Unlock()
			if _, werr := dc.redis.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// toClient copies Redis's replies to the client, but for a doomed
// connection's next one: then it cuts.
func (p *replyDropper) toClient(dc *droppedConn) {
	defer p.forget(dc)
	buf := make([]byte, 64<<10)
	for {
		n, err := dc.redis.Read(buf)
		if n > 0 {
			p.mu.Lock()
			doomed, cut := dc.doomed, p.cut
			if doomed && cut {
				p.cutAll()
			}
			p.mu.Unlock()
			if doomed {
				dc.close() // the reply is dropped
				return
			}
			if _, werr := dc.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dc.close()
			}
			return
		}
	}
}

func (p *replyDropper) forget(dc *droppedConn) {
	dc.close()
	p.mu.Lock()
	delete(p.conns, dc)
	p.mu.Unlock()
}

func (dc *droppedConn) close() {
	_ = dc.client.Close()
	_ = dc.redis.Close()
}
