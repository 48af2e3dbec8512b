package tunnel_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestAsyncFastPathDoneMarker: the first attempt of an async request
// without a key of its caller's runs on the fast path, and its success
// leaves what a claimed one leaves: its entry retired and a done marker
// (SUCCESS, by this worker, at attempt 1) kept for the idempotency
// window, with nothing of a claim in it.
func TestAsyncFastPathDoneMarker(t *testing.T) {
	w := newAsyncWorld(t, tunnel.ClientOptions{})
	ctx := context.Background()
	w.serve(tunnel.ServerOptions{WorkerID: "w1", IdempotencyWindow: time.Hour})
	receipt, err := w.enqueue("Do", "once")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the request to run", func() bool { return w.jobs.count("once") == 1 })
	state := "rpr:v1:{" + jobsService + "}:st:" + receipt.RequestID
	var marker map[string]string
	waitFor(t, "its done marker", func() bool {
		marker = w.rdb.HGetAll(ctx, state).Val()
		return marker["state"] == wire.StateSuccess
	})
	if marker["worker"] != "w1" || marker["attempt"] != "1" || marker["done_ms"] == "" {
		t.Errorf("done marker = %v; want worker w1, attempt 1 and done_ms", marker)
	}
	for _, claim := range []string{"lease", "entry", "claimed_ms"} {
		if _, ok := marker[claim]; ok {
			t.Errorf("done marker has the claim field %q: %v", claim, marker)
		}
	}
	if ttl := w.rdb.PTTL(ctx, state).Val(); ttl <= 0 || ttl > time.Hour {
		t.Errorf("done marker TTL = %v; want the idempotency window (1h)", ttl)
	}
	if s, r := w.queued(); s != 0 || r != 0 {
		t.Errorf("%d entries left in the stream, %d in the retry set; want none", s, r)
	}
}

// TestGoneReaderMayHaveRunAsync: a worker's read of an async request on
// the fast path is its claim, so requests left pending under a worker
// that is gone may have run. Taken over, an idempotent method's run again
// (each once); a non-idempotent method's are never run a second time but
// dead-lettered "outcome unknown", to be replayed by an operator who knows.
func TestGoneReaderMayHaveRunAsync(t *testing.T) {
	w := newAsyncWorld(t, tunnel.ClientOptions{})
	w.servedOnceThenStopped()
	for _, v := range []string{"a", "b", "c"} {
		if _, err := w.enqueue("Do", "do-"+v); err != nil {
			t.Fatal(err)
		}
		if _, err := w.enqueue("Redo", "redo-"+v); err != nil {
			t.Fatal(err)
		}
	}
	w.readAsGoneWorker(6)
	w.serve(tunnel.ServerOptions{Lease: time.Second})
	waitFor(t, "three dead letters and three reruns", func() bool {
		s, r := w.queued()
		return len(w.deadLetters()) == 3 && w.jobs.distinct() == 4 && s == 0 && r == 0
	})
	for _, v := range []string{"a", "b", "c"} {
		if n := w.jobs.count("redo-" + v); n != 1 {
			t.Errorf("idempotent request %s ran %d times, want once", v, n)
		}
		if n := w.jobs.count("do-" + v); n != 0 {
			t.Errorf("non-idempotent request %s ran %d times, want never", v, n)
		}
	}
	for _, letter := range w.deadLetters() {
		reason, _ := letter.Values["reason"].(string)
		if !strings.Contains(reason, "outcome unknown: worker "+goneWorker+" died while running it") {
			t.Errorf("dead letter reason = %q; want outcome unknown naming gone-worker", reason)
		}
	}
}

// TestAsyncFastPathWaitsForOlderWorkers: while the service has a worker
// of a release before the async fast path (its record does not announce
// async_fast_path), async requests are claimed in their state hash as
// before, so that worker, taking one over, finds it claimed; once that
// worker's record is gone, they take the fast path.
func TestAsyncFastPathWaitsForOlderWorkers(t *testing.T) {
	w := newAsyncWorld(t, tunnel.ClientOptions{})
	ctx := context.Background()
	workers := "rpr:v1:{" + jobsService + "}:workers"
	now := redisTimeMs(t, w.rdb)
	older := `{"host":"old","pid":1,"started_ms":` + strconv.FormatInt(now, 10) + `,"beat_ms":` + strconv.FormatInt(now, 10) + `}`
	if err := w.rdb.HSet(ctx, workers, "older-worker", older).Err(); err != nil {
		t.Fatal(err)
	}
	running, release := make(chan string), make(chan struct{})
	w.jobs.setFunc(func(_ context.Context, in *wrapperspb.StringValue) error {
		running <- in.GetValue()
		<-release
		return nil
	})
	w.serve(tunnel.ServerOptions{})
	stateWhileRunning := func(value string) map[string]string {
		t.Helper()
		receipt, err := w.enqueue("Do", value)
		if err != nil {
			t.Fatal(err)
		}
		<-running
		defer func() { release <- struct{}{} }()
		return w.rdb.HGetAll(ctx, "rpr:v1:{"+jobsService+"}:st:"+receipt.RequestID).Val()
	}
	if st := stateWhileRunning("beside-older"); st["state"] != wire.StateProcessing {
		t.Errorf("state while running beside an older worker = %v; want it claimed PROCESSING", st)
	}
	if err := w.rdb.HDel(ctx, workers, "older-worker").Err(); err != nil {
		t.Fatal(err)
	}
	probe := 0
	waitFor(t, "a request to run on the fast path once the older worker is gone", func() bool {
		probe++
		return len(stateWhileRunning("alone-"+strconv.Itoa(probe))) == 0
	})
}
