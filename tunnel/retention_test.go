package tunnel_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestRetentionKeepsFinishedUnaryCalls: a server with Retention keeps a
// record of each unary call it answers, under the request id, for the
// retention: the outcome, worker, times and size, never the payload; the
// call stays on the fast path (no state hash). Its worker record says how
// long it keeps them.
func TestRetentionKeepsFinishedUnaryCalls(t *testing.T) {
	e := newEnv(t, envConfig{server: tunnel.ServerOptions{WorkerID: "keeper", Retention: time.Minute}})
	ctx := context.Background()
	var okID, failID string
	if out, err := e.call(ctx, "Echo", "secret-payload", tunnel.CaptureRequestID(&okID)); err != nil || out != "echo: secret-payload" {
		t.Fatalf("Echo: %q, %v", out, err)
	}
	if _, err := e.call(ctx, "Fail", "o-7", tunnel.CaptureRequestID(&failID)); tunnel.CodeOf(err) != tunnel.NotFound {
		t.Fatalf("Fail: %v", err)
	}
	tag := "rpr:v1:{" + echoService + "}"
	record := func(id string) (wire.Finished, string, time.Duration) {
		t.Helper()
		raw, err := e.rdb.Get(ctx, tag+":done:"+id).Result()
		if err != nil {
			t.Fatalf("the record of %s: %v", id, err)
		}
		f, ok := wire.ParseFinished(raw)
		if !ok {
			t.Fatalf("the record of %s does not parse: %q", id, raw)
		}
		return f, raw, e.rdb.PTTL(ctx, tag+":done:"+id).Val()
	}

	ok, raw, ttl := record(okID)
	if ok.Method != "Echo" || ok.Worker != "keeper" || ok.Code != 0 || ok.Message != "" || ok.Bytes != len("echo: secret-payload")+2 ||
		ok.StartedMs == 0 || ok.DoneMs < ok.StartedMs || ok.Key != "" {
		t.Errorf("record of a call that succeeded: %+v", ok)
	}
	if strings.Contains(raw, "secret-payload") {
		t.Errorf("the record keeps the payload: %s", raw)
	}
	if ttl <= 0 || ttl > time.Minute {
		t.Errorf("the record's TTL is %v, want at most the retention (1m)", ttl)
	}
	fail, _, _ := record(failID)
	if fail.Method != "Fail" || fail.Code != uint32(tunnel.NotFound) || !strings.Contains(fail.Message, `order "o-7" not found`) || fail.Bytes != 0 {
		t.Errorf("record of a call that failed: %+v", fail)
	}
	// Still the fast path: the calls have no state hash.
	for _, id := range []string{okID, failID} {
		if n, err := e.rdb.Exists(ctx, tag+":st:"+id).Result(); err != nil || n != 0 {
			t.Errorf("call %s has a state hash; the fast path writes none", id)
		}
	}
	// The worker record tells tools how long calls are kept.
	w, found := wire.ParseWorker(e.rdb.HGet(ctx, tag+":workers", "keeper").Val())
	if !found || w.RetentionMs != time.Minute.Milliseconds() {
		t.Errorf("worker record %+v: want retention_ms %d", w, time.Minute.Milliseconds())
	}
}

// TestNoRetentionByDefault: by default a unary call leaves nothing in
// Redis once answered, and the worker record says it keeps nothing.
func TestNoRetentionByDefault(t *testing.T) {
	e := newEnv(t, envConfig{server: tunnel.ServerOptions{WorkerID: "forgetter"}})
	ctx := context.Background()
	var id string
	if _, err := e.call(ctx, "Echo", "x", tunnel.CaptureRequestID(&id)); err != nil {
		t.Fatal(err)
	}
	tag := "rpr:v1:{" + echoService + "}"
	if keys, err := e.rdb.Keys(ctx, tag+":*"+id+"*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("an answered call left %v", keys)
	}
	raw := e.rdb.HGet(ctx, tag+":workers", "forgetter").Val()
	var fields map[string]any
	if err := json.Unmarshal([]byte(raw), &fields); err != nil {
		t.Fatal(err)
	}
	if _, set := fields["retention_ms"]; set {
		t.Errorf("worker record %s: retention_ms set without Retention", raw)
	}
}

// TestRetainedCallMemory measures what a kept record costs Redis (MEMORY
// USAGE of one; BenchmarkUnaryEchoRetention measures used_memory per call)
// and holds it to a budget.
func TestRetainedCallMemory(t *testing.T) {
	e := newEnv(t, envConfig{server: tunnel.ServerOptions{Retention: time.Hour}})
	ctx := context.Background()
	var id string
	if _, err := e.call(ctx, "Echo", "hello", tunnel.CaptureRequestID(&id)); err != nil {
		t.Fatal(err)
	}
	key := "rpr:v1:{" + echoService + "}:done:" + id
	size, err := e.rdb.MemoryUsage(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("record %s = %s: %d bytes (MEMORY USAGE)", key, e.rdb.Get(ctx, key).Val(), size)
	if size > 400 { // ServerOptions.Retention budgets about 320 bytes of used_memory
		t.Errorf("a kept record takes %d bytes, want at most 400 (ServerOptions.Retention budgets 320 of used_memory)", size)
	}
}

// TestAsyncOwnKeyFindableByID: an async request sent with an idempotency
// key of its own (which names its state) can be found by its request id
// once done: the key's state names the request, and a record under the id
// names the key, both for the idempotency window. A request with the
// default key (its id) gets neither.
func TestAsyncOwnKeyFindableByID(t *testing.T) {
	w := newAsyncWorld(t, tunnel.ClientOptions{})
	w.serve(tunnel.ServerOptions{IdempotencyWindow: time.Hour})
	ctx := context.Background()
	tag := "rpr:v1:{" + jobsService + "}"
	own, err := w.enqueue("Do", "own", tunnel.WithIdempotencyKey("order-1042"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := w.enqueue("Do", "plain")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"order-1042", plain.RequestID} {
		waitFor(t, key+" to succeed", func() bool { return w.rdb.HGet(ctx, tag+":st:"+key, wire.StateField).Val() == wire.StateSuccess })
	}
	if got := w.rdb.HGet(ctx, tag+":st:order-1042", wire.StateID).Val(); got != own.RequestID {
		t.Errorf("the key's state names request %q, want %s", got, own.RequestID)
	}
	raw, err := w.rdb.Get(ctx, tag+":done:"+own.RequestID).Result()
	if f, ok := wire.ParseFinished(raw); err != nil || !ok || f.Key != "order-1042" {
		t.Errorf("record under the id: %q, %v; want the key", raw, err)
	}
	stateTTL, recordTTL := w.rdb.PTTL(ctx, tag+":st:order-1042").Val(), w.rdb.PTTL(ctx, tag+":done:"+own.RequestID).Val()
	if recordTTL <= 0 || recordTTL > time.Hour || recordTTL < stateTTL-time.Minute {
		t.Errorf("record TTL %v, state TTL %v: want both the idempotency window (1h)", recordTTL, stateTTL)
	}
	// What the alias costs: the record, and the id field in the state.
	recordBytes := w.rdb.MemoryUsage(ctx, tag+":done:"+own.RequestID).Val()
	ownState, plainState := w.rdb.MemoryUsage(ctx, tag+":st:order-1042").Val(), w.rdb.MemoryUsage(ctx, tag+":st:"+plain.RequestID).Val()
	t.Logf("id alias of a request with a key of its own: record %d bytes, its state %d bytes (with the id field) against %d (MEMORY USAGE)",
		recordBytes, ownState, plainState)
	if recordBytes > 300 {
		t.Errorf("the id alias takes %d bytes, want at most 300", recordBytes)
	}
	if w.rdb.Exists(ctx, tag+":done:"+plain.RequestID).Val() != 0 || w.rdb.HExists(ctx, tag+":st:"+plain.RequestID, wire.StateID).Val() {
		t.Errorf("a request with the default key got a record or an id field; its state is named by its id already")
	}
}
