package faulttest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

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

// TestDuplicateDeliveryResendsStoredResponse delivers a finished request
// again, byte for byte the same envelope (as after a reclaim): the worker
// sends the stored response to the caller's stream again and does not run
// the handler a second time.
func TestDuplicateDeliveryResendsStoredResponse(t *testing.T) {
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
	var raw string
	select {
	case v := <-spied:
		msg, ok := v.(redis.XMessage)
		if !ok {
			t.Fatalf("spy: %v", v)
		}
		raw, _ = msg.Values["e"].(string)
	case <-time.After(20 * time.Second):
		t.Fatal("the spy saw no request")
	}
	if id := envelopeField(t, raw, "id"); id != first.rid {
		t.Fatalf("the spy caught request %q, want %q", id, first.rid)
	}
	w.waitDrained(10 * time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	respKey := responseStream(clientID)
	from := "-"
	if last, err := w.rdb.XRevRangeN(ctx, respKey, "+", "-", 1).Result(); err != nil {
		t.Fatal(err)
	} else if len(last) > 0 {
		from = "(" + last[0].ID
	}

	// The duplicate delivery.
	if err := w.rdb.XAdd(ctx, &redis.XAddArgs{Stream: requestStream, Values: []any{"e", raw}}).Err(); err != nil {
		t.Fatal(err)
	}
	// The client's reader consumes the response (and logs it as one for a
	// call no longer waiting); its trim keeps the last entry read, so the
	// response is normally still in the stream to be inspected.
	var resent map[string]any
	var logged bool
	waitUntil(t, 10*time.Second, "the stored response on the client's response stream", func() bool {
		entries, err := w.rdb.XRange(ctx, respKey, from, "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			s, _ := e.Values["e"].(string)
			if m := decodeMap(t, s); m["id"] == first.rid {
				resent = m
				return true
			}
		}
		for _, line := range c.logs.Lines("no longer waiting") {
			logged = logged || strings.Contains(line, first.rid)
		}
		return logged
	})
	if resent == nil {
		t.Logf("the client received the resent response (it says so in its log); the entry was trimmed before it could be inspected")
	} else {
		if code := fmt.Sprint(resent["c"]); code != "0" {
			t.Errorf("resent response has code %s (%s), want OK", code, resent["msg"])
		}
		payload, _ := resent["p"].([]byte)
		reply := new(wrapperspb.StringValue)
		if err := proto.Unmarshal(payload, reply); err != nil || reply.GetValue() != first.rid {
			t.Errorf("resent response payload = %q (%v), want the stored reply %q", reply.GetValue(), err, first.rid)
		}
	}

	w.waitDrained(10 * time.Second)
	execs := w.execs()
	checkOutcomes(t, []outcome{warm, first}, execs, tunnel.OK)
	if n := execs[first.rid]; n != 1 {
		t.Errorf("request ran %d times; the duplicate delivery must not run it again", n)
	}
	if st := w.state(first.rid)["state"]; st != "SUCCESS" {
		t.Errorf("state = %q, want SUCCESS", st)
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
