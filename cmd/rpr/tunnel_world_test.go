package main

// tunWorld is the loopback world of the fault tests: a real redis-server
// (internal/redistest), rpr egress and rpr ingress as child processes of
// the test, and recording upstreams in the test process.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/ingress"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	"github.com/rprtunnel/rpr/internal/redistest"
)

type tunWorld struct {
	t       *testing.T
	redis   *redistest.Server
	rdb     *redis.Client
	admin   *admin.Client
	ingress *tunProc
	base    string // the ingress's http://host:port
	client  *http.Client
}

func newTunWorld(t *testing.T, opts ...redistest.Option) *tunWorld {
	t.Helper()
	rs := redistest.Start(t, opts...)
	w := &tunWorld{t: t, redis: rs, rdb: rs.Client(t)}
	w.admin = admin.New(w.rdb, admin.Options{})
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(transport.CloseIdleConnections)
	// The hard bound of every request: no test request may hang.
	w.client = &http.Client{Transport: transport, Timeout: 60 * time.Second}
	return w
}

// svc is the admin handle of the HTTP tunnel service.
func (w *tunWorld) svc() *admin.Service { return w.admin.Service(upstream.HTTPService) }

// startEgress starts rpr egress as worker id and waits until it beats.
func (w *tunWorld) startEgress(id string) *tunProc {
	w.t.Helper()
	p := startEgressProc(w.t, "", w.redis.URL(), id)
	w.waitLive(id)
	return p
}

// waitLive waits until worker id beats for the HTTP tunnel service.
func (w *tunWorld) waitLive(id string) {
	w.t.Helper()
	tunWait(w.t, 30*time.Second, "egress "+id+" to beat", func() bool {
		h, err := w.svc().Health(context.Background())
		if err != nil {
			return false
		}
		for _, wk := range h.Workers {
			if wk.ID == id && wk.Live {
				return true
			}
		}
		return false
	})
}

// startIngress starts rpr ingress on loopback; start it after the routes
// are set, so that it loads them at once.
func (w *tunWorld) startIngress() {
	w.t.Helper()
	var addr string
	w.ingress, addr, _ = startIngressProc(w.t, "", w.redis.URL(), "127.0.0.1", false)
	w.base = "http://" + addr
}

// setRoute runs rpr upstreams set NAME with args and requires exit 0.
func (w *tunWorld) setRoute(name string, args ...string) tunRun {
	w.t.Helper()
	run := runRPRChild(w.t, "", 30*time.Second, append([]string{"upstreams", "set", name, "--redis", w.redis.URL()}, args...)...)
	if run.code != 0 {
		w.t.Fatalf("rpr upstreams set %s %s: exit %d\n%s", name, strings.Join(args, " "), run.code, run.out)
	}
	return run
}

// tunAnswer is what the ingress answered one request.
type tunAnswer struct {
	status  int
	header  http.Header
	body    string
	elapsed time.Duration
	err     error // the request got no answer at all
}

func (a tunAnswer) String() string {
	if a.err != nil {
		return fmt.Sprintf("no answer after %v: %v", a.elapsed.Round(time.Millisecond), a.err)
	}
	return fmt.Sprintf("%d (%s: %q) after %v: %q", a.status, ingress.OutcomeHeader, a.header.Get(ingress.OutcomeHeader), a.elapsed.Round(time.Millisecond), strings.TrimSpace(a.body))
}

func (a tunAnswer) outcome() string   { return a.header.Get(ingress.OutcomeHeader) }
func (a tunAnswer) requestID() string { return a.header.Get(ingress.RequestIDHeader) }

// send makes one request to the ingress; hdr holds name, value pairs.
func (w *tunWorld) send(method, path string, body []byte, hdr ...string) tunAnswer {
	req, err := http.NewRequest(method, w.base+path, bytes.NewReader(body))
	if err != nil {
		return tunAnswer{err: err}
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	t0 := time.Now()
	resp, err := w.client.Do(req)
	if err != nil {
		return tunAnswer{err: err, elapsed: time.Since(t0)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return tunAnswer{status: resp.StatusCode, header: resp.Header, body: string(b), elapsed: time.Since(t0), err: err}
}

// tunReceipt is an async route's 202 answer.
type tunReceipt struct {
	RequestID      string `json:"request_id"`
	IdempotencyKey string `json:"idempotency_key"`
}

// post sends an async request with key and requires 202 and a receipt.
func (w *tunWorld) post(path, key string, body []byte) tunReceipt {
	w.t.Helper()
	a := w.send("POST", path, body, "Idempotency-Key", key)
	var r tunReceipt
	if a.err != nil || a.status != http.StatusAccepted || json.Unmarshal([]byte(a.body), &r) != nil || r.RequestID == "" || r.IdempotencyKey != key {
		w.t.Fatalf("POST %s (key %s): want 202 and a receipt for the key, got %v", path, key, a)
	}
	return r
}

// stats reads the HTTP tunnel service's queue figures.
func (w *tunWorld) stats() (admin.ServiceStats, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return w.svc().Stats(ctx)
}

// waitSettled waits until nothing is queued, pending or waiting for a
// retry in the HTTP tunnel service.
func (w *tunWorld) waitSettled(timeout time.Duration) admin.ServiceStats {
	w.t.Helper()
	var st admin.ServiceStats
	tunWait(w.t, timeout, "the HTTP tunnel's queue to settle", func() bool {
		var err error
		st, err = w.stats()
		return err == nil && st.Length == 0 && st.Pending == 0 && st.Retrying == 0
	})
	return st
}

// deadLetters lists the HTTP tunnel's dead letters with rpr dlq ls -o json.
func (w *tunWorld) deadLetters() []deadLetter {
	w.t.Helper()
	run := runRPRChild(w.t, "", 30*time.Second, "dlq", "ls", upstream.HTTPService, "--redis", w.redis.URL(), "--limit", "0", "-o", "json")
	if run.code != 0 {
		w.t.Fatalf("rpr dlq ls: exit %d\n%s", run.code, run.out)
	}
	var list struct {
		Total       int64        `json:"total"`
		DeadLetters []deadLetter `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(run.out), &list); err != nil {
		w.t.Fatalf("rpr dlq ls -o json: %v\n%s", err, run.out)
	}
	if int(list.Total) != len(list.DeadLetters) {
		w.t.Fatalf("rpr dlq ls -o json: total %d, %d listed", list.Total, len(list.DeadLetters))
	}
	return list.DeadLetters
}

// logLines returns p's lines that contain every one of words.
func logLines(p *tunProc, words ...string) []string {
	var out []string
	for _, l := range p.out.Lines() {
		all := true
		for _, word := range words {
			all = all && strings.Contains(l, word)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}

// tunStreamed is how a streamed answer went: its status, its first line,
// and how reading the rest ended.
type tunStreamed struct {
	status      int
	first, rest string
	restErr     error
	elapsed     time.Duration
}

func (s tunStreamed) String() string {
	return fmt.Sprintf("%d, first %q, then %q and %v, after %v", s.status, s.first, s.rest, s.restErr, s.elapsed.Round(time.Millisecond))
}

// stream sends a GET to the ingress and reads the answer's first line,
// then the rest; first is closed once the first line has been read, or
// the request or that read failed, so that a test can act between the
// first line and the rest.
func (w *tunWorld) stream(path string, first chan<- struct{}, hdr ...string) tunStreamed {
	var once sync.Once
	firstDone := func() { once.Do(func() { close(first) }) }
	defer firstDone()
	req, err := http.NewRequest("GET", w.base+path, nil)
	if err != nil {
		return tunStreamed{restErr: err}
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	t0 := time.Now()
	resp, err := w.client.Do(req)
	if err != nil {
		return tunStreamed{restErr: err, elapsed: time.Since(t0)}
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	s := tunStreamed{status: resp.StatusCode}
	s.first, err = r.ReadString('\n')
	firstDone()
	if err == nil {
		var rest []byte
		rest, err = io.ReadAll(r)
		s.rest = string(rest)
	}
	s.restErr, s.elapsed = err, time.Since(t0)
	return s
}
