package faulttest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/rprtunnel/rpr/tunnel"
)

// TestQueueWaitLongerThanDeadline keeps the only handler slot of a server
// busy while a second call waits in the queue past its deadline. That call
// fails with DEADLINE_EXCEEDED, provably not executed (the client's TIMEOUT
// mark won the arbiter), and its handler never runs, not even once the
// server is free again.
func TestQueueWaitLongerThanDeadline(t *testing.T) {
	w := newWorld(t)
	w.startLocalServer(tunnel.ServerOptions{Concurrency: 1})
	c := w.newClient(tunnel.ClientOptions{})

	long := c.goCalls(1, writeMethod, 20*time.Second, func(int) string { return "3s" })
	waitUntil(t, 20*time.Second, "the long call to occupy the only handler slot", func() bool {
		return len(w.execs()) == 1
	})

	queued := c.call(writeMethod, "10ms", 500*time.Millisecond)
	if queued.rid == "" {
		t.Fatalf("queued call: no request id captured: %v", queued)
	}
	if queued.code() != tunnel.DeadlineExceeded || !tunnel.NotExecuted(queued.err) {
		t.Errorf("queued call %v: want DEADLINE_EXCEEDED with NotExecuted(err) true (NotExecuted = %v)", queued, tunnel.NotExecuted(queued.err))
	}
	if queued.took() > queued.timeout+hangSlack { // a bound against hanging
		t.Errorf("queued call %v returned long after its deadline", queued)
	}
	if st := w.state(queued.rid)["state"]; st != "TIMEOUT" {
		t.Errorf("state of the queued call while the server is busy: %q, want TIMEOUT", st)
	}

	first := long.wait(t, 30*time.Second)[0]
	if first.err != nil {
		t.Fatalf("long call: %v", first)
	}
	w.waitDrained(20 * time.Second) // the server has taken the queued entry and retired it
	after := c.call(writeMethod, "10ms", 10*time.Second)
	if after.err != nil {
		t.Errorf("call after the server freed up: %v", after)
	}

	execs := w.execs()
	checkOutcomes(t, []outcome{first, queued, after}, execs, tunnel.OK, tunnel.DeadlineExceeded)
	if n := execs[queued.rid]; n != 0 {
		t.Errorf("the queued call ran %d time(s) after its deadline passed", n)
	}
	if ws := w.runs().started[queued.rid]; len(ws) != 0 {
		t.Errorf("the queued call was started on %v", ws)
	}
	if st := w.state(queued.rid)["state"]; st != "TIMEOUT" {
		t.Errorf("state of the queued call after the server took it: %q, want TIMEOUT", st)
	}
}

// TestFinishedRequestIsNeverDeliveredAgain: a unary request's entry is
// acknowledged and deleted in the same step that writes its answer, so once
// it has finished no worker can ever be handed it again (a crash or a
// reclaim cannot make it run twice), and it leaves no state behind.
func TestFinishedRequestIsNeverDeliveredAgain(t *testing.T) {
	w := newWorld(t)
	w.startLocalServer(tunnel.ServerOptions{})
	const clientID = "dup-client"
	c := w.newClient(tunnel.ClientOptions{ID: clientID})
	warm := c.call(writeMethod, "0s", 10*time.Second) // sets up the client's streams
	if warm.err != nil {
		t.Fatalf("first call: %v", warm)
	}

	// A spy reads the request stream without a group, so it sees the next
	// envelope before the worker retires it, and takes nothing from anyone.
	spy := redis.NewClient(&redis.Options{Addr: w.redis.Addr(), ClientName: "rprtest-spy"})
	defer spy.Close()
	spied := make(chan any, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := spy.XRead(ctx, &redis.XReadArgs{Streams: []string{requestStream, "$"}, Count: 1, Block: 20 * time.Second}).Result()
		if err != nil {
			spied <- err
			return
		}
		spied <- res[0].Messages[0]
	}()
	waitUntil(t, 10*time.Second, "the spy to block on the request stream", func() bool {
		ctx, cancel := shortCtx()
		defer cancel()
		list, _ := w.rdb.ClientList(ctx).Result()
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, "name=rprtest-spy ") && strings.Contains(line, "cmd=xread") {
				return true
			}
		}
		return false
	})

	first := c.call(writeMethod, "10ms", 30*time.Second)
	if first.err != nil {
		t.Fatalf("call: %v", first)
	}
	var raw, entry string
	select {
	case v := <-spied:
		msg, ok := v.(redis.XMessage)
		if !ok {
			t.Fatalf("spy: %v", v)
		}
		raw, _ = msg.Values["e"].(string)
		entry = msg.ID
	case <-time.After(20 * time.Second):
		t.Fatal("the spy saw no request")
	}
	if id := envelopeField(t, raw, "id"); id != first.rid {
		t.Fatalf("the spy caught request %q, want %q", id, first.rid)
	}
	w.waitDrained(10 * time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if left, err := w.rdb.XRange(ctx, requestStream, entry, entry).Result(); err != nil || len(left) != 0 {
		t.Errorf("the finished request's entry %s is still in the stream: %v, %v", entry, left, err)
	}
	if pending, err := w.rdb.XPending(ctx, requestStream, "workers").Result(); err != nil || pending.Count != 0 {
		t.Errorf("pending entries after the calls finished: %+v, %v; want none", pending, err)
	}
	// Another worker scanning for abandoned requests finds nothing to take.
	claimed, _, err := w.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: requestStream, Group: "workers", Consumer: "scavenger", MinIdle: 0, Start: "0-0", Count: 100}).Result()
	if err != nil || len(claimed) != 0 {
		t.Errorf("a reclaim scan found %d entries (%v); want none", len(claimed), err)
	}
	if st := w.state(first.rid); len(st) != 0 {
		t.Errorf("state hash of a finished unary call: %v, want none", st)
	}
	execs := w.execs()
	checkOutcomes(t, []outcome{warm, first}, execs, tunnel.OK)
	if n := execs[first.rid]; n != 1 {
		t.Errorf("request ran %d times, want 1", n)
	}
}

func decodeMap(t *testing.T, raw string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := msgpack.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatalf("envelope does not decode as msgpack: %v", err)
	}
	return m
}

func envelopeField(t *testing.T, raw, field string) string {
	t.Helper()
	s, _ := decodeMap(t, raw)[field].(string)
	return s
}
