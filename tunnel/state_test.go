package tunnel_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/tunnel"
)

func stateKey(rid string) string { return "rpr:v1:{test.v1.Echo}:st:" + rid }

// occupy keeps the only handler slot busy with a slow call and returns a
// func that waits for it to end.
func occupy(t *testing.T, e *env, d string) func() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = e.call(context.Background(), "Slow", d)
	}()
	waitFor(t, "the slow call to start", func() bool { return e.count("Slow") == 1 })
	return func() { <-done }
}

func TestDeadlineInQueueIsProvablyNotExecuted(t *testing.T) {
	e := newEnv(t, envConfig{server: tunnel.ServerOptions{Concurrency: 1}})
	wait := occupy(t, e, "1s")
	var rid string
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := e.call(ctx, "Echo", "queued", tunnel.CaptureRequestID(&rid))
	if tunnel.CodeOf(err) != tunnel.DeadlineExceeded || !tunnel.NotExecuted(err) {
		t.Fatalf("err = %v (NotExecuted %v), want DEADLINE_EXCEEDED not executed", err, tunnel.NotExecuted(err))
	}
	if state := e.rdb.HGet(context.Background(), stateKey(rid), "state").Val(); state != "TIMEOUT" {
		t.Errorf("state = %q, want TIMEOUT", state)
	}
	wait()
	e.settled(t)
	if n := e.count("Echo"); n != 1 { // the liveness probe only
		t.Errorf("Echo ran %d times, want 1: the timed-out request ran", n)
	}
}

func TestCancelInQueueIsProvablyNotExecuted(t *testing.T) {
	e := newEnv(t, envConfig{server: tunnel.ServerOptions{Concurrency: 1}})
	wait := occupy(t, e, "1s")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	var rid string
	_, err := e.call(ctx, "Echo", "queued", tunnel.CaptureRequestID(&rid))
	if tunnel.CodeOf(err) != tunnel.Canceled || !tunnel.NotExecuted(err) {
		t.Fatalf("err = %v, want CANCELED not executed", err)
	}
	wait()
	e.settled(t)
	if n := e.count("Echo"); n != 1 {
		t.Errorf("Echo ran %d times, want 1", n)
	}
	if state := e.rdb.HGet(context.Background(), stateKey(rid), "state").Val(); state != "CANCELLED" {
		t.Errorf("state = %q, want CANCELLED", state)
	}
}

func TestDeadlineDuringExecutionMayHaveExecuted(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := e.call(ctx, "Slow", "2s")
	if tunnel.CodeOf(err) != tunnel.DeadlineExceeded || tunnel.NotExecuted(err) {
		t.Fatalf("err = %v (NotExecuted %v), want DEADLINE_EXCEEDED that may have executed", err, tunnel.NotExecuted(err))
	}
	// Depending on who sees the deadline first, the client settles it with
	// the arbiter (the handler is running, or has just ended), or the
	// handler's own DEADLINE_EXCEEDED answer arrives first.
	msg := err.Error()
	if !strings.Contains(msg, "may have taken effect") && !strings.Contains(msg, "it ran and ended") && !strings.Contains(msg, "context deadline exceeded") {
		t.Errorf("message does not say the request may have run: %v", err)
	}
}

// TestFastPathLeavesNothingBehind: a unary call that goes well writes no
// state hash, and its request entry is acknowledged and deleted together
// with its answer, so it can never be delivered again.
func TestFastPathLeavesNothingBehind(t *testing.T) {
	e := newEnv(t, envConfig{})
	var rid string
	if _, err := e.call(context.Background(), "Echo", "x", tunnel.CaptureRequestID(&rid)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e.settled(t) // nothing pending or queued: the entry was acknowledged and deleted
	if n := e.rdb.Exists(ctx, stateKey(rid)).Val(); n != 0 {
		t.Errorf("state hash of a finished unary call exists: %v", e.rdb.HGetAll(ctx, stateKey(rid)).Val())
	}
	if n := e.count("Echo(x)"); n != 1 {
		t.Errorf("the call ran %d times, want 1", n)
	}
}

// TestFastPathOrphanOfNonIdempotentMethodIsAborted: a unary request taken
// by a worker that died (no state hash: the fast path) may have run, so a
// non-idempotent one is answered ABORTED "outcome unknown", not run again.
func TestFastPathOrphanOfNonIdempotentMethodIsAborted(t *testing.T) {
	e := newEnv(t, envConfig{noServe: true, server: tunnel.ServerOptions{Lease: 200 * time.Millisecond}})
	reply := replyStream(t, e, "orphan-caller")
	rid := "20261129-TEST-1795995318695-HHHHHHHHHH"
	plantFastOrphan(t, e, "Echo", rid, reply)
	e.serve()
	resp := readResponse(t, e, reply)
	if fmt.Sprint(resp["c"]) != fmt.Sprint(uint32(tunnel.Aborted)) {
		t.Fatalf("response = %v, want ABORTED", resp)
	}
	if msg, _ := resp["msg"].(string); !strings.Contains(msg, "outcome unknown: worker ghost died while executing "+rid) {
		t.Errorf("message = %q, want outcome unknown", msg)
	}
	checkTakenOver(t, e, rid, reply, "FAILED")
	if n := e.count("Echo"); n != 1 { // the liveness probe only
		t.Errorf("Echo ran %d times, want 1: an orphan was run again", n)
	}
}

// TestFastPathOrphanOfIdempotentMethodIsRerun: the same for an idempotent
// method runs it again.
func TestFastPathOrphanOfIdempotentMethodIsRerun(t *testing.T) {
	e := newEnv(t, envConfig{noServe: true, server: tunnel.ServerOptions{Lease: 200 * time.Millisecond}})
	reply := replyStream(t, e, "orphan-caller")
	rid := "20261129-TEST-1795995318695-JJJJJJJJJJ"
	plantFastOrphan(t, e, "Idem", rid, reply)
	e.serve()
	if resp := readResponse(t, e, reply); fmt.Sprint(resp["c"]) != "0" {
		t.Fatalf("response = %v, want OK", resp)
	}
	checkTakenOver(t, e, rid, reply, "SUCCESS")
	if n := e.count("Idem"); n != 1 {
		t.Errorf("Idem ran %d times, want 1", n)
	}
}

// checkTakenOver checks what is left once a server took over request rid
// from the dead worker "ghost": one answer on reply, the entry retired,
// the state hash in final under this server (ghost recorded as the
// previous worker), and one takeover in the server's stats.
func checkTakenOver(t *testing.T, e *env, rid, reply, final string) {
	t.Helper()
	ctx := context.Background()
	e.settled(t)
	if n := e.rdb.XLen(ctx, reply).Val(); n != 1 {
		t.Errorf("%d answers on the reply stream, want 1", n)
	}
	st := e.rdb.HGetAll(ctx, stateKey(rid)).Val()
	if st["state"] != final || st["worker"] != e.server.WorkerID() || st["previous_worker"] != "ghost" {
		t.Errorf("state hash = %v, want %s under %s, taken over from ghost", st, final, e.server.WorkerID())
	}
	if n := e.server.Stats().Reclaimed; n != 1 {
		t.Errorf("%d requests taken over, want 1", n)
	}
}

// plantFastOrphan makes it look as if worker "ghost" took a unary request
// on the fast path and died: the entry sits in ghost's pending list and
// there is no state hash.
func plantFastOrphan(t *testing.T, e *env, method, rid, replyTo string) (entry string) {
	t.Helper()
	ctx := context.Background()
	fields := validFields(rid, replyTo)
	fields["m"] = echoService + "/" + method
	e.xadd(t, "e", rawEnvelope(t, fields))
	if err := e.rdb.XGroupCreateMkStream(ctx, requestStream, "workers", "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		t.Fatal(err)
	}
	res, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "ghost", Streams: []string{requestStream, ">"}, Count: 1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Messages[0].ID
}

func TestRetryReusesTheRequestIDUntilAServerAppears(t *testing.T) {
	e := newEnv(t, envConfig{noServe: true})
	type result struct {
		got string
		err error
	}
	done := make(chan result, 1)
	var rid string
	go func() {
		got, err := e.call(context.Background(), "Echo", "retried",
			tunnel.WithRetry(tunnel.RetryPolicy{MaxAttempts: 10, InitialBackoff: 100 * time.Millisecond}),
			tunnel.CaptureRequestID(&rid))
		done <- result{got, err}
	}()
	// The server starts once the first attempt has found none.
	waitFor(t, "the call to retry", func() bool { return len(e.logs.Lines("rpr: retrying")) > 0 })
	e.serve()
	r := <-done
	if r.err != nil || r.got != "echo: retried" {
		t.Fatalf("got %q, %v", r.got, r.err)
	}
	if n := e.count("Echo(retried)"); n != 1 {
		t.Errorf("the call ran %d times, want once for all its attempts", n)
	}
	// It ran under the request id the caller got, on a later attempt.
	if a := e.attemptsRun(rid); len(a) != 1 || a[0] < 2 {
		t.Errorf("request %s ran with attempts %v, want one run on attempt 2 or later", rid, a)
	}
	for _, l := range e.logs.Lines("rpr: retrying") {
		if !strings.Contains(l, "request_id="+rid) {
			t.Errorf("a retry under another request id: %s", l)
		}
	}
}

func TestNoRetryWithoutPolicy(t *testing.T) {
	e := newEnv(t, envConfig{noServe: true})
	_, err := e.call(context.Background(), "Echo", "x")
	if tunnel.CodeOf(err) != tunnel.Unavailable || !tunnel.NotExecuted(err) {
		t.Fatalf("err = %v, want UNAVAILABLE not executed", err)
	}
}

func TestRetryPolicyRefusesUnsafeRetries(t *testing.T) {
	e := newEnv(t, envConfig{})
	// The handler answered with a retryable code, so it ran: a
	// non-idempotent method is not retried.
	_, err := e.call(context.Background(), "Fail", "x", tunnel.WithRetry(tunnel.RetryPolicy{RetryableCodes: []tunnel.Code{tunnel.NotFound}}))
	attempts := e.count("Fail")
	if tunnel.CodeOf(err) != tunnel.NotFound || attempts != 1 {
		t.Fatalf("err = %v after %d executions; want NOT_FOUND after exactly 1 (not idempotent)", err, attempts)
	}
}

func TestLongHandlerKeepsItsLease(t *testing.T) {
	e := newEnv(t, envConfig{server: tunnel.ServerOptions{Lease: 300 * time.Millisecond}})
	// a second server that would steal the request if its lease lapsed
	other, _ := startServer(t, e.rdb, tunnel.ServerOptions{Lease: 300 * time.Millisecond, Logger: e.server2Logger()},
		func(s *tunnel.Server) { s.RegisterService(&echoDesc, e.handlers()) })

	got, err := e.call(context.Background(), "Slow", "1500ms")
	if err != nil || got != "slept 1500ms" {
		t.Fatalf("got %q, %v", got, err)
	}
	if n := e.count("Slow"); n != 1 {
		t.Errorf("Slow ran %d times, want 1: a live handler's request was taken over", n)
	}
	if s1, s2 := e.server.Stats(), other.Stats(); s1.Reclaimed+s2.Reclaimed != 0 || s1.LeasesLost+s2.LeasesLost != 0 {
		t.Errorf("stats = %+v / %+v, want no reclaims or lost leases", s1, s2)
	}
}

// plantOrphan makes it look as if worker "ghost" took a request and died
// mid-execution: the entry sits in ghost's pending list and the state says
// PROCESSING under ghost with a lapsed lease.
func plantOrphan(t *testing.T, e *env, method, rid, replyTo string) {
	t.Helper()
	entry := plantFastOrphan(t, e, method, rid, replyTo)
	e.rdb.HSet(context.Background(), stateKey(rid), "state", "PROCESSING", "worker", "ghost", "entry", entry,
		"lease", time.Now().Add(-time.Second).UnixMilli(), "attempt", 1)
}

func TestOrphanOfNonIdempotentMethodIsAbortedNotRerun(t *testing.T) {
	e := newEnv(t, envConfig{noServe: true, server: tunnel.ServerOptions{Lease: 200 * time.Millisecond}})
	reply := replyStream(t, e, "orphan-caller")
	rid := "20261129-TEST-1795995318695-EEEEEEEEEE"
	plantOrphan(t, e, "Echo", rid, reply)
	e.serve()
	resp := readResponse(t, e, reply)
	if fmt.Sprint(resp["c"]) != fmt.Sprint(uint32(tunnel.Aborted)) {
		t.Fatalf("response = %v, want ABORTED", resp)
	}
	want := "outcome unknown: worker ghost died while executing " + rid
	if msg, _ := resp["msg"].(string); !strings.Contains(msg, want) {
		t.Errorf("message = %q, want it to contain %q", msg, want)
	}
	checkTakenOver(t, e, rid, reply, "FAILED")
	if n := e.count("Echo"); n != 1 { // the liveness probe only
		t.Errorf("Echo ran %d times, want 1: an orphan was run again", n)
	}
}

func TestOrphanOfIdempotentMethodIsRerun(t *testing.T) {
	e := newEnv(t, envConfig{noServe: true, server: tunnel.ServerOptions{Lease: 200 * time.Millisecond}})
	reply := replyStream(t, e, "orphan-caller")
	rid := "20261129-TEST-1795995318695-FFFFFFFFFF"
	plantOrphan(t, e, "Idem", rid, reply)
	e.serve()
	resp := readResponse(t, e, reply)
	if fmt.Sprint(resp["c"]) != "0" {
		t.Fatalf("response = %v, want OK", resp)
	}
	checkTakenOver(t, e, rid, reply, "SUCCESS")
	if n := e.count("Idem"); n != 1 {
		t.Errorf("Idem ran %d times, want 1", n)
	}
}
