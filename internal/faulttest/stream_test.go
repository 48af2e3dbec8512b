package faulttest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// Streams under faults: the worker or the caller SIGKILLed mid-stream,
// Redis stalled by CLIENT PAUSE, Redis restarted with an AOF. For every
// stream the test checks exactly what the caller sent and received and
// what the handler took and how often it ran (see stream_service_test.go
// for fault.v1.Feed and what it records).

// startStreamServer starts a server process of fault.v1.Feed.
func startStreamServer(t *testing.T, redisURL, worker string) *proc {
	t.Helper()
	p := startProc(t, "stream server "+worker, envRole+"="+roleStreamServer, envRedisURL+"="+redisURL, envWorker+"="+worker)
	p.waitMarker(markerReady, 60*time.Second)
	return p
}

// streamRun is one stream an in-process caller keeps busy: what it sent
// and received, and how it ended.
type streamRun struct {
	method *tunnel.MethodDesc
	rid    string
	done   chan struct{}

	mu    sync.Mutex
	sent  int      // messages Send accepted
	got   []string // messages received, in order
	reply int64    // Upload's answer
	err   error    // how the stream ended; nil: OK
	end   time.Time
}

func (r *streamRun) snapshot() (sent int, got []string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent, slices.Clone(r.got), r.err
}

func (r *streamRun) received() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func (r *streamRun) finish(err error) {
	r.mu.Lock()
	r.err, r.end = err, time.Now()
	r.mu.Unlock()
	close(r.done)
}

// goStream opens a stream of m and runs it on a goroutine: n messages (n <
// 0: until the stream ends) with gap between them. Tail asks for n replies
// one per gap; Upload sends "0".."n-1" and closes; Echo sends each and
// waits for its echo, then closes.
func goStream(t *testing.T, c *tunnel.Client, m *tunnel.MethodDesc, n int, gap time.Duration) *streamRun {
	t.Helper()
	r := &streamRun{method: m, done: make(chan struct{})}
	raw, err := c.NewStream(context.Background(), m, tunnel.CaptureRequestID(&r.rid))
	if err != nil {
		t.Fatalf("open %s: %v", m.Name, err)
	}
	s := &tunnel.GenericClientStream[sv, sv]{ClientStream: raw}
	recv := func() error {
		msg, err := s.Recv()
		if err == nil {
			r.mu.Lock()
			r.got = append(r.got, msg.GetValue())
			r.mu.Unlock()
		}
		return err
	}
	sent := func() {
		r.mu.Lock()
		r.sent++
		r.mu.Unlock()
	}
	go func() {
		switch m {
		case tailMethod:
			if err := s.Send(wrapperspb.String(fmt.Sprintf("%d/%v", n, gap))); err != nil {
				r.finish(err)
				return
			}
			sent()
			if err := s.CloseSend(); err != nil {
				r.finish(err)
				return
			}
			for {
				if err := recv(); err != nil {
					r.finish(endOf(err))
					return
				}
			}
		case uploadMethod:
			for i := 0; n < 0 || i < n; i++ {
				if err := s.Send(wrapperspb.String(strconv.Itoa(i))); err != nil {
					// The stream ended; RecvMsg says how.
					r.finish(s.RecvMsg(new(wrapperspb.Int64Value)))
					return
				}
				sent()
				time.Sleep(gap)
			}
			if err := s.CloseSend(); err != nil {
				r.finish(err)
				return
			}
			out := new(wrapperspb.Int64Value)
			err := s.RecvMsg(out)
			r.mu.Lock()
			r.reply = out.GetValue()
			r.mu.Unlock()
			r.finish(err)
		case echoMethod:
			for i := 0; n < 0 || i < n; i++ {
				if err := s.Send(wrapperspb.String(strconv.Itoa(i))); err != nil {
					r.finish(endOf(s.RecvMsg(new(sv))))
					return
				}
				sent()
				if err := recv(); err != nil {
					r.finish(endOf(err))
					return
				}
				time.Sleep(gap)
			}
			if err := s.CloseSend(); err != nil {
				r.finish(err)
				return
			}
			r.finish(endOf(recv()))
		}
	}()
	return r
}

// endOf turns a clean end (io.EOF) into nil.
func endOf(err error) error {
	if isEOFErr(err) {
		return nil
	}
	if err == nil {
		return fmt.Errorf("a message after the end")
	}
	return err
}

// waitStreams waits for every run to end, failing after timeout (a hang).
func waitStreams(t *testing.T, timeout time.Duration, runs ...*streamRun) {
	t.Helper()
	deadline := time.After(timeout)
	for _, r := range runs {
		select {
		case <-r.done:
		case <-deadline:
			t.Fatalf("%s (%s) still running after %v: a stream hangs", r.method.Name, r.rid, timeout)
		}
	}
}

// inOrder checks that got is prefix+"0", prefix+"1", ...: nothing lost,
// duplicated or reordered.
func inOrder(t *testing.T, what string, got []string, prefix string) {
	t.Helper()
	for i, v := range got {
		if v != prefix+strconv.Itoa(i) {
			t.Errorf("%s: message %d is %q, want %q (lost, duplicated or reordered); got %d messages", what, i, v, prefix+strconv.Itoa(i), len(got))
			return
		}
	}
}

// progress returns the handlers' recorded progress per request id.
func (w *world) progress() map[string]int { return w.intHash(streamProgressKey) }

// TestStreamKillServerMidStream SIGKILLs the worker running one stream of
// each kind. Each caller is told that its stream broke (UNAVAILABLE, with
// the number of messages it had received, and that the request may have
// had effects: not NotExecuted), has received exactly the messages sent,
// in order, and none of the streams runs again, though a second worker is
// live all along.
func TestStreamKillServerMidStream(t *testing.T) {
	w := newWorld(t)
	victim := startStreamServer(t, w.redis.URL(), "w1")
	c := w.newClient(tunnel.ClientOptions{})
	runs := []*streamRun{
		goStream(t, c.client, tailMethod, -1, 20*time.Millisecond),
		goStream(t, c.client, uploadMethod, -1, 20*time.Millisecond),
		goStream(t, c.client, echoMethod, -1, 20*time.Millisecond),
	}
	tail, up, echo := runs[0], runs[1], runs[2]
	waitUntil(t, 30*time.Second, "the three streams to be well under way on w1", func() bool {
		p := w.progress()
		return tail.received() >= 20 && echo.received() >= 20 && p[up.rid] >= 20
	})
	survivor := startStreamServer(t, w.redis.URL(), "w2")
	killedAt := time.Now()
	victim.Kill()
	t.Logf("SIGKILLed stream server w1 (pid %d)", victim.PID())
	waitStreams(t, 40*time.Second, runs...)

	progress := w.progress()
	for _, r := range runs {
		sent, got, err := r.snapshot()
		t.Logf("%s [%s]: ended %v after the kill, sent %d, received %d: %v", r.method.Name, r.rid, r.end.Sub(killedAt).Round(10*time.Millisecond), sent, len(got), err)
		if tunnel.CodeOf(err) != tunnel.Unavailable || tunnel.NotExecuted(err) {
			t.Errorf("%s: %v (NotExecuted %v), want UNAVAILABLE that may have had effects", r.method.Name, err, tunnel.NotExecuted(err))
		}
		for _, part := range []string{"stream broke", fmt.Sprintf("received %d messages", len(got)), "may have had effects"} {
			if !strings.Contains(fmt.Sprint(err), part) {
				t.Errorf("%s: error %q does not say %q", r.method.Name, err, part)
			}
		}
		switch r.method {
		case tailMethod:
			inOrder(t, "Tail", got, "")
			if progress[r.rid] < len(got) {
				t.Errorf("Tail: the caller received %d messages, the handler recorded sending %d", len(got), progress[r.rid])
			}
		case uploadMethod:
			if progress[r.rid] > sent {
				t.Errorf("Upload: the handler took %d messages, the caller sent %d", progress[r.rid], sent)
			}
		case echoMethod:
			inOrder(t, "Echo", got, "echo ")
			if len(got) > sent || progress[r.rid] > sent {
				t.Errorf("Echo: %d echoes and %d taken by the handler for %d sent", len(got), progress[r.rid], sent)
			}
		}
	}
	// Well past a lease and a takeover scan: a stream handed on would
	// have been by now.
	time.Sleep(6 * time.Second)
	execs, ix := w.execs(), w.runs()
	for _, r := range runs {
		if execs[r.rid] != 1 || !slices.Equal(ix.started[r.rid], []string{"w1"}) {
			t.Errorf("%s [%s] ran %d times, on %v; want once, on w1 (a stream is never run again)", r.method.Name, r.rid, execs[r.rid], ix.started[r.rid])
		}
	}
	if err := survivor.Term(20 * time.Second); err != nil {
		t.Errorf("survivor shutdown: %v", err)
	}
}

// TestStreamKillClientMidStream SIGKILLs a client process with one stream
// of each kind open on a server process: every handler's context ends by
// itself, saying the caller is gone, within a few seconds; each ran once;
// the streams' state and the dead client's response stream expire; the
// server goes on and shuts down cleanly.
func TestStreamKillClientMidStream(t *testing.T) {
	w := newWorld(t)
	server := startStreamServer(t, w.redis.URL(), "w1")
	const victimID = "stream-victim"
	victim := startProc(t, "stream client", envRole+"="+roleStreamClient, envRedisURL+"="+w.redis.URL(), envStreamClientID+"="+victimID)
	victim.waitMarker(markerCalling, 60*time.Second)
	rids := map[string]string{} // method -> request id
	for _, line := range strings.Split(victim.out.String(), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "stream" {
			rids[f[1]] = f[2]
		}
	}
	if len(rids) != 3 {
		t.Fatalf("the client printed streams %v, want Tail, Upload and Echo", rids)
	}
	waitUntil(t, 20*time.Second, "the three handlers to run", func() bool {
		e := w.execs()
		return e[rids["Tail"]] == 1 && e[rids["Upload"]] == 1 && e[rids["Echo"]] == 1
	})
	killedAt := time.Now()
	victim.Kill()

	waitUntil(t, 40*time.Second, "every handler to end after its caller was killed", func() bool {
		ix := w.runs()
		for _, rid := range rids {
			if len(ix.finished[rid]) == 0 {
				return false
			}
		}
		return true
	})
	ctx, cancel := shortCtx()
	defer cancel()
	causes, err := w.rdb.HGetAll(ctx, streamCauseKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	execs := w.execs()
	for method, rid := range rids {
		msText, cause, _ := strings.Cut(causes[rid], " ")
		ms, _ := strconv.ParseInt(msText, 10, 64)
		if !strings.Contains(cause, "caller is gone") {
			t.Errorf("%s [%s]: handler's context ended with %q, want a cause saying the caller is gone", method, rid, causes[rid])
		}
		t.Logf("%s [%s]: handler's context ended %v after the caller's SIGKILL: %s", method, rid, time.UnixMilli(ms).Sub(killedAt).Round(10*time.Millisecond), cause)
		if execs[rid] != 1 {
			t.Errorf("%s [%s] ran %d times, want once", method, rid, execs[rid])
		}
	}

	// Every per-stream key expires by itself: the streams' state hashes
	// and the dead caller's response stream. (The worker's inbox is the
	// worker's and lives, renewed, as long as it does.)
	perStream := []string{feedResponses(victimID)}
	for _, rid := range rids {
		perStream = append(perStream, feedStateKey(rid))
	}
	for _, key := range perStream {
		if d := w.rdb.PTTL(ctx, key).Val(); d <= 0 || d > time.Minute {
			t.Errorf("%s has PTTL %v after its stream ended; want an expiry within a minute", key, d)
		}
	}
	waitUntil(t, 90*time.Second, "every per-stream key to expire", func() bool {
		ctx, cancel := shortCtx()
		defer cancel()
		return w.rdb.Exists(ctx, perStream...).Val() == 0
	})
	t.Logf("every per-stream key expired %v after the caller's SIGKILL", time.Since(killedAt).Round(time.Second))
	if d := w.rdb.PTTL(context.Background(), feedInbox("w1")).Val(); d <= 0 {
		t.Errorf("the worker's inbox has PTTL %v, want an expiry", d)
	}

	if server.Exited() {
		t.Fatalf("the server exited: %v", server.err)
	}
	if err := server.Term(20 * time.Second); err != nil {
		t.Errorf("server shutdown after SIGTERM: %v", err)
	}
}

// streamFaultScenario runs one stream of each kind (n messages, gap apart)
// from an in-process client against a server process, applies fault once
// they are under way, and checks that every stream completed with exactly
// its messages, in order, each handler run once.
func streamFaultScenario(t *testing.T, w *world, fault func()) {
	t.Helper()
	startStreamServer(t, w.redis.URL(), "w1")
	c := w.newClient(tunnel.ClientOptions{Breaker: tunnel.BreakerOptions{Disabled: true}})
	const n = 300
	gap := 10 * time.Millisecond
	runs := []*streamRun{
		goStream(t, c.client, tailMethod, n, gap),
		goStream(t, c.client, uploadMethod, n, gap),
		goStream(t, c.client, echoMethod, n, gap),
	}
	tail, up, echo := runs[0], runs[1], runs[2]
	waitUntil(t, 30*time.Second, "the streams to be under way", func() bool {
		return tail.received() >= 30 && echo.received() >= 30 && w.progress()[up.rid] >= 30
	})
	p := w.progress()
	at := map[string]int{"Tail": tail.received(), "Upload": p[up.rid], "Echo": echo.received()}
	fault()
	waitStreams(t, 90*time.Second, runs...)
	t.Logf("messages through each stream when the fault began: %v (of %d)", at, n)
	for name, k := range at {
		if k >= n {
			t.Errorf("%s was over before the fault: it proves nothing", name)
		}
	}

	progress, execs, ix := w.progress(), w.execs(), w.runs()
	for _, r := range runs {
		sent, got, err := r.snapshot()
		if err != nil {
			t.Errorf("%s [%s]: %v (sent %d, received %d)", r.method.Name, r.rid, err, sent, len(got))
		}
		switch r.method {
		case tailMethod:
			inOrder(t, "Tail", got, "")
			if len(got) != n {
				t.Errorf("Tail: received %d messages, want %d", len(got), n)
			}
		case uploadMethod:
			r.mu.Lock()
			reply := r.reply
			r.mu.Unlock()
			if sent != n || reply != n || progress[r.rid] != n {
				t.Errorf("Upload: sent %d, the handler took %d (recorded %d), want %d", sent, reply, progress[r.rid], n)
			}
		case echoMethod:
			inOrder(t, "Echo", got, "echo ")
			if sent != n || len(got) != n || progress[r.rid] != n {
				t.Errorf("Echo: sent %d, echoes %d, the handler took %d, want %d", sent, len(got), progress[r.rid], n)
			}
		}
		if execs[r.rid] != 1 || !slices.Equal(ix.started[r.rid], []string{"w1"}) || !slices.Equal(ix.finished[r.rid], []string{"w1"}) {
			t.Errorf("%s [%s] ran %d times (started on %v, ended on %v), want once", r.method.Name, r.rid, execs[r.rid], ix.started[r.rid], ix.finished[r.rid])
		}
	}
}

// TestStreamClientPause stalls Redis with CLIENT PAUSE 3000 ALL while
// streams flow both ways: nothing is lost or duplicated, order is kept,
// every stream ends OK.
func TestStreamClientPause(t *testing.T) {
	w := newWorld(t)
	admin := w.redis.Client(t)
	if err := admin.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	streamFaultScenario(t, w, func() {
		if err := admin.Do(context.Background(), "CLIENT", "PAUSE", 3000, "ALL").Err(); err != nil {
			t.Fatalf("CLIENT PAUSE: %v", err)
		}
		t.Log("CLIENT PAUSE 3000 ALL")
	})
}

// TestStreamRedisRestartAOF restarts Redis, persisting with appendonly yes
// and appendfsync always, while streams flow both ways: after a clean
// shutdown (SIGTERM) and after a crash (SIGKILL: every write Redis
// acknowledged is on disk). Nothing is lost or duplicated, order is kept,
// every stream ends OK.
func TestStreamRedisRestartAOF(t *testing.T) {
	for _, how := range []string{"SIGTERM", "SIGKILL"} {
		t.Run(how, func(t *testing.T) {
			w := newWorld(t, redistest.WithConfig("appendonly", "yes"), redistest.WithConfig("appendfsync", "always"))
			streamFaultScenario(t, w, func() {
				downAt := time.Now()
				if how == "SIGKILL" {
					w.redis.Kill()
				} else {
					w.redis.Stop()
				}
				time.Sleep(time.Second)
				w.redis.Restart(t)
				t.Logf("Redis %s and restarted after %v", how, time.Since(downAt).Round(10*time.Millisecond))
			})
		})
	}
}
