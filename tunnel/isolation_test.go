package tunnel_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

// One bad entry never hurts the others of its batch: each test queues
// good requests together with bad ones before the server starts, so that
// they are read, begun and completed in the same script calls.

// answers waits until key holds n responses and returns their codes
// (0 for OK).
func answers(t *testing.T, e *env, key string, n int) []uint64 {
	t.Helper()
	ctx := context.Background()
	waitFor(t, fmt.Sprintf("%d answers on %s", n, key), func() bool { return e.rdb.XLen(ctx, key).Val() >= int64(n) })
	msgs, err := e.rdb.XRange(ctx, key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var codes []uint64
	for _, m := range msgs {
		var resp struct {
			Code uint64 `msgpack:"c"`
		}
		if err := msgpack.Unmarshal([]byte(m.Values["e"].(string)), &resp); err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.Code)
	}
	return codes
}

// TestBadReplyToDoesNotHurtItsBatch: requests whose reply-to names a key
// of the service's response namespace holding a string are dead-lettered,
// each with a reason naming the key, and the good answers that share their
// script calls are delivered; the foreign key is left as it was.
func TestBadReplyToDoesNotHurtItsBatch(t *testing.T) {
	e := newEnv(t, envConfig{noServe: true})
	ctx := context.Background()
	good := replyStream(t, e, "good")
	squatted := "rpr:v1:{test.v1.Echo}:resp:squatted"
	if err := e.rdb.Set(ctx, squatted, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	const goods, bads = 24, 8
	for i := range goods + bads {
		replyTo := good
		if i%4 == 1 {
			replyTo = squatted
		}
		e.xadd(t, "e", rawEnvelope(t, validFields(fmt.Sprintf("20261201-TEST-1795995318695-R%09d", i), replyTo)))
	}
	e.serve()
	for i, code := range answers(t, e, good, goods) {
		if code != 0 {
			t.Errorf("answer %d has code %d, want OK", i, code)
		}
	}
	e.settled(t)
	reasons := e.deadLetterReasons(t)
	if len(reasons) != bads {
		t.Fatalf("%d dead letters, want %d: %q", len(reasons), bads, reasons)
	}
	for _, r := range reasons {
		if !strings.Contains(r, "reply-to "+squatted+" holds a string, not a response stream") || !strings.Contains(r, "delete that key") {
			t.Errorf("dead letter reason %q: want it to name the key, what it holds and what to do", r)
		}
	}
	if v := e.rdb.Get(ctx, squatted).Val(); v != "not a stream" {
		t.Errorf("the foreign key now holds %q", v)
	}
	e.stillServes(t)
}

// TestBadDeadlineReclaim: unary requests a dead worker took on the fast
// path are taken over together, some with deadlines far out of range and
// one whose state key holds a string; the good ones and those with far
// deadlines, being idempotent, run again and are answered, and the one
// with the foreign state is answered FAILED_PRECONDITION naming the key
// and dead-lettered, not run.
func TestBadDeadlineReclaim(t *testing.T) {
	e := newEnv(t, envConfig{noServe: true, server: tunnel.ServerOptions{Lease: time.Second}})
	ctx := context.Background()
	reply := replyStream(t, e, "reclaimed")
	deadlines := []int64{math.MaxInt64, 1e15, math.MaxInt64 / 2}
	const goods = 6
	total := goods + len(deadlines) + 1
	foreignID := fmt.Sprintf("20261201-TEST-1795995318695-D%09d", total-1)
	foreign := "rpr:v1:{test.v1.Echo}:st:" + foreignID
	if err := e.rdb.Set(ctx, foreign, "somebody else's", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range total {
		fields := validFields(fmt.Sprintf("20261201-TEST-1795995318695-D%09d", i), reply)
		fields["m"] = echoService + "/Idem"
		fields["p"] = mustMarshal(wrapperspb.String("v" + strconv.Itoa(i)))
		if i >= goods && i < goods+len(deadlines) {
			fields["dl"] = deadlines[i-goods]
		}
		e.xadd(t, "e", rawEnvelope(t, fields))
	}
	if err := e.rdb.XGroupCreateMkStream(ctx, requestStream, "workers", "0").Err(); err != nil {
		t.Fatal(err)
	}
	// Worker "ghost" takes them all and dies (it never had a heartbeat).
	if err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "ghost", Streams: []string{requestStream, ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	e.serve()
	var ok, refused int
	for _, code := range answers(t, e, reply, total) {
		switch code {
		case 0:
			ok++
		case uint64(tunnel.FailedPrecondition):
			refused++
		}
	}
	if ok != total-1 || refused != 1 {
		t.Errorf("%d answers OK and %d FAILED_PRECONDITION, want %d and 1", ok, refused, total-1)
	}
	e.settled(t)
	for i := range total - 1 {
		if n := e.count("Idem(v" + strconv.Itoa(i) + ")"); n != 1 {
			t.Errorf("request %d ran %d times, want once", i, n)
		}
	}
	if n := e.count("Idem(v" + strconv.Itoa(total-1) + ")"); n != 0 {
		t.Errorf("the request with the foreign state ran %d times", n)
	}
	r := e.deadLetterReasons(t)
	if len(r) != 1 || !strings.Contains(r[0], "not executed: its state key "+foreign+" holds a string") {
		t.Errorf("dead letters: %q, want one naming %s", r, foreign)
	}
}

// TestForeignStateKeyAsyncBatch: an async request whose state key holds a
// foreign value is dead-lettered, not executed, with a reason naming the
// key and what to do; the 20 good requests read with it all run.
func TestForeignStateKeyAsyncBatch(t *testing.T) {
	w := newAsyncWorld(t, tunnel.ClientOptions{})
	ctx := context.Background()
	const goods = 20
	for i := range goods / 2 {
		if _, err := w.enqueue("Do", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.enqueue("Do", "poisoned", tunnel.WithIdempotencyKey("poisoned")); err != nil {
		t.Fatal(err)
	}
	for i := goods / 2; i < goods; i++ {
		if _, err := w.enqueue("Do", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	foreign := "rpr:v1:{" + jobsService + "}:st:poisoned"
	if err := w.rdb.Set(ctx, foreign, "somebody else's", 0).Err(); err != nil {
		t.Fatal(err)
	}
	stop := w.serve(tunnel.ServerOptions{})
	waitFor(t, "the good requests to run", func() bool { return w.jobs.distinct() >= goods })
	waitFor(t, "the queue to empty", func() bool { s, r := w.queued(); return s == 0 && r == 0 })
	waitFor(t, "the bad request's dead letter", func() bool { return len(w.deadLetters()) > 0 })
	stop()
	for i := range goods {
		if n := w.jobs.count(strconv.Itoa(i)); n != 1 {
			t.Errorf("request %d ran %d times, want once", i, n)
		}
	}
	if n := w.jobs.count("poisoned"); n != 0 {
		t.Errorf("the request with the foreign state ran %d times", n)
	}
	letters := w.deadLetters()
	if len(letters) != 1 {
		t.Fatalf("%d dead letters, want 1", len(letters))
	}
	reason, _ := letters[0].Values["reason"].(string)
	for _, want := range []string{"not executed", "state key " + foreign + " holds a string", "delete that key", "rpr dlq replay"} {
		if !strings.Contains(reason, want) {
			t.Errorf("dead letter reason %q: want %q", reason, want)
		}
	}
	if v := w.rdb.Get(ctx, foreign).Val(); v != "somebody else's" {
		t.Errorf("the foreign key now holds %q", v)
	}
}

// TestReplaySkipsAForeignStateKeyAlone: replaying dead letters together,
// one whose idempotency key's state holds a foreign value is skipped with
// a reason naming the key and kept, while the others are queued again and
// run; once the key is deleted it replays too.
func TestReplaySkipsAForeignStateKeyAlone(t *testing.T) {
	w := newAsyncWorld(t, tunnel.ClientOptions{})
	ctx := context.Background()
	var fixed atomic.Bool
	w.jobs.setFunc(func(_ context.Context, in *wrapperspb.StringValue) error {
		if !fixed.Load() {
			return tunnel.Permanent(errors.New("not yet"))
		}
		return nil
	})
	for _, v := range []string{"a", "b"} {
		if _, err := w.enqueue("Do", v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.enqueue("Do", "poisoned", tunnel.WithIdempotencyKey("poisoned")); err != nil {
		t.Fatal(err)
	}
	foreign := "rpr:v1:{" + jobsService + "}:st:poisoned"
	if err := w.rdb.Set(ctx, foreign, "somebody else's", 0).Err(); err != nil {
		t.Fatal(err)
	}
	w.serve(tunnel.ServerOptions{})
	waitFor(t, "3 dead letters", func() bool { return len(w.deadLetters()) == 3 })
	fixed.Store(true)

	dlq := admin.New(w.rdb, admin.Options{}).Service(jobsService).DeadLetters()
	letters, err := dlq.List(ctx, admin.DeadLetterFilter{}, 0)
	if err != nil || len(letters) != 3 {
		t.Fatalf("List: %d letters, %v", len(letters), err)
	}
	res, err := dlq.Replay(ctx, letters, nil)
	if err != nil || res.Replayed != 2 || len(res.Skipped) != 1 {
		t.Fatalf("Replay = %+v, %v; want 2 replayed and the foreign one skipped", res, err)
	}
	for _, reason := range res.Skipped {
		if !strings.Contains(reason, foreign) || !strings.Contains(reason, "delete that key") {
			t.Errorf("skipped because %q: want the key named and what to do", reason)
		}
	}
	waitFor(t, "the replayed requests to run", func() bool { return w.jobs.count("a") == 2 && w.jobs.count("b") == 2 })
	if n := len(w.deadLetters()); n != 1 {
		t.Errorf("%d dead letters left, want the skipped one", n)
	}

	w.rdb.Del(ctx, foreign)
	letters, err = dlq.List(ctx, admin.DeadLetterFilter{}, 0)
	if err != nil || len(letters) != 1 {
		t.Fatalf("List: %d letters, %v", len(letters), err)
	}
	if res, err := dlq.Replay(ctx, letters, nil); err != nil || res.Replayed != 1 {
		t.Fatalf("Replay after deleting the key = %+v, %v", res, err)
	}
	waitFor(t, "the request to run", func() bool { return w.jobs.count("poisoned") == 1 })
}
