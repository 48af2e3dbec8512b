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
	if n := e.rdb.Exists(ctx, stateKey(rid)).Val(); n != 0 {
		t.Errorf("state hash of a finished unary call exists: %v", e.rdb.HGetAll(ctx, stateKey(rid)).Val())
	}
	e.settled(t)
	if n := e.rdb.XLen(ctx, requestStream).Val(); n != 0 {
		t.Errorf("request stream holds %d entries after the calls finished, want 0", n)
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
	if n := e.count("Echo"); n != 1 { // the liveness probe only
		t.Errorf("Echo ran %d times, want 1: an orphan was run again", n)
	}
}

// TestFastPathOrphanOfIdempotentMethodIsRerun: the same for an idempotent
// method runs it again.
func TestFastPathOrphanOfIdempotentMethodIsRerun(t *testing.T) {
	e := newEnv(t, envConfig{noServe: true, server: tunnel.ServerOptions{Lease: 200 * time.Millisecond}})
	reply := replyStream(t, e, "orphan-caller")
	plantFastOrphan(t, e, "Idem", "20261129-TEST-1795995318695-JJJJJJJJJJ", reply)
	e.serve()
	if resp := readResponse(t, e, reply); fmt.Sprint(resp["c"]) != "0" {
		t.Fatalf("response = %v, want OK", resp)
	}
	if n := e.count("Idem"); n != 1 {
		t.Errorf("Idem ran %d times, want 1", n)
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
	e.rdb.XGroupCreateMkStream(ctx, requestStream, "workers", "0")
	res, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "ghost", Streams: []string{requestStream, ">"}, Count: 1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Messages[0].ID
}

func TestRetryReusesTheRequestIDUntilAServerAppears(t *testing.T) {
	e := newEnv(t, envConfig{noServe: true})
	go func() {
		time.Sleep(300 * time.Millisecond)
		e.serve()
	}()
	var rid string
	got, err := e.call(context.Background(), "Echo", "retried",
		tunnel.WithRetry(tunnel.RetryPolicy{MaxAttempts: 10, InitialBackoff: 100 * time.Millisecond}),
		tunnel.CaptureRequestID(&rid))
	if err != nil || got != "echo: retried" {
		t.Fatalf("got %q, %v", got, err)
	}
	if n := e.count("Echo(retried)"); n != 1 {
		t.Errorf("the call ran %d times, want once for all its attempts", n)
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
	other, err := tunnel.NewServer(e.rdb, tunnel.ServerOptions{Lease: 300 * time.Millisecond, Logger: e.server2Logger()})
	if err != nil {
		t.Fatal(err)
	}
	other.RegisterService(&echoDesc, e.handlers())
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- other.Serve(ctx) }()
	defer func() { stop(); <-done }()

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
	if n := e.count("Echo"); n != 1 { // the liveness probe only
		t.Errorf("Echo ran %d times, want 1: an orphan was run again", n)
	}
	e.settled(t)
	if st := e.rdb.HGet(context.Background(), stateKey(rid), "state").Val(); st != "FAILED" {
		t.Errorf("state = %q, want FAILED", st)
	}
	if e.server.Stats().Reclaimed != 1 {
		t.Errorf("stats = %+v, want 1 reclaimed", e.server.Stats())
	}
}

func TestOrphanOfIdempotentMethodIsRerun(t *testing.T) {
	e := newEnv(t, envConfig{noServe: true, server: tunnel.ServerOptions{Lease: 200 * time.Millisecond}})
	reply := replyStream(t, e, "orphan-caller")
	plantOrphan(t, e, "Idem", "20261129-TEST-1795995318695-FFFFFFFFFF", reply)
	e.serve()
	resp := readResponse(t, e, reply)
	if fmt.Sprint(resp["c"]) != "0" {
		t.Fatalf("response = %v, want OK", resp)
	}
	if n := e.count("Idem"); n != 1 {
		t.Errorf("Idem ran %d times, want 1", n)
	}
	e.settled(t)
}
