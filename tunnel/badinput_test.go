package tunnel_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

// Keys of the test service, spelled out as an operator would see them.
const (
	requestStream = "rpr:v1:{test.v1.Echo}:req"
	deadLetters   = "rpr:v1:{test.v1.Echo}:dlq"
)

// rawEnvelope builds a request envelope by hand, as a buggy or foreign
// client might.
func rawEnvelope(t *testing.T, fields map[string]any) string {
	t.Helper()
	b, err := msgpack.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func validFields(id, replyTo string) map[string]any {
	return map[string]any{
		"v": 1, "id": id, "m": echoService + "/Echo", "dl": time.Now().Add(time.Minute).UnixMilli(),
		"r": replyTo, "t": time.Now().UnixMilli(), "a": 1, "k": 1,
		"p": mustMarshal(wrapperspb.String("raw")),
	}
}

// replyStream makes a response stream the test reads itself.
func replyStream(t *testing.T, e *env, name string) string {
	key := "rpr:v1:{test.v1.Echo}:resp:" + name
	if err := e.rdb.XGroupCreateMkStream(context.Background(), key, "client", "0").Err(); err != nil {
		t.Fatal(err)
	}
	return key
}

// readResponse waits for one response on key and decodes it loosely.
func readResponse(t *testing.T, e *env, key string) map[string]any {
	t.Helper()
	res, err := e.rdb.XRead(context.Background(), &redis.XReadArgs{Streams: []string{key, "0"}, Count: 1, Block: 10 * time.Second}).Result()
	if err != nil {
		t.Fatalf("no response on %s: %v", key, err)
	}
	var resp map[string]any
	if err := msgpack.Unmarshal([]byte(res[0].Messages[0].Values["e"].(string)), &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

func (e *env) xadd(t *testing.T, values ...any) {
	t.Helper()
	if err := e.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: requestStream, Values: values}).Err(); err != nil {
		t.Fatal(err)
	}
}

// settled waits until the request stream has nothing pending or queued.
func (e *env) settled(t *testing.T) {
	t.Helper()
	waitFor(t, "the request stream to drain", func() bool {
		n, _ := e.rdb.XLen(context.Background(), requestStream).Result()
		p, _ := e.rdb.XPending(context.Background(), requestStream, "workers").Result()
		return n == 0 && p != nil && p.Count == 0
	})
}

func (e *env) deadLetterReasons(t *testing.T) []string {
	t.Helper()
	entries, err := e.rdb.XRange(context.Background(), deadLetters, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, m := range entries {
		reasons = append(reasons, m.Values["reason"].(string))
	}
	return reasons
}

// stillServes checks the server answers a normal call.
func (e *env) stillServes(t *testing.T) {
	t.Helper()
	if got, err := e.call(context.Background(), "Echo", "ok"); err != nil || got != "echo: ok" {
		t.Fatalf("server stopped serving after bad input: %q, %v", got, err)
	}
}

func TestGarbageEntriesAreDeadLetteredAndServerKeepsServing(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.xadd(t, "e", "\xff\x00 this is not msgpack")
	e.xadd(t, "something", "else")
	e.xadd(t, "e", rawEnvelope(t, map[string]any{"v": 1, "id": "x", "surprise": true}))
	e.settled(t)
	reasons := e.deadLetterReasons(t)
	if len(reasons) != 3 {
		t.Fatalf("dead letters = %q, want 3", reasons)
	}
	// handlers run concurrently, so dead letters may come in any order
	var malformed, noField int
	for _, r := range reasons {
		switch {
		case strings.Contains(r, "malformed envelope"):
			malformed++
		case strings.Contains(r, `entry has no "e" field`):
			noField++
		}
	}
	if malformed != 2 || noField != 1 {
		t.Errorf("dead letter reasons = %q, want 2 malformed envelopes and 1 entry without an envelope", reasons)
	}
	if !strings.Contains(e.logs.String(), "bad request envelope; dead-lettered") {
		t.Error("bad envelope not logged")
	}
	e.stillServes(t)
}

func TestUnknownEnvelopeVersionIsAnsweredAndDeadLettered(t *testing.T) {
	e := newEnv(t, envConfig{})
	reply := replyStream(t, e, "foreign")
	fields := validFields("20261129-TEST-1795995318695-AAAAAAAAAA", reply)
	fields["v"] = 4 // a version no release speaks yet
	fields["new-field"] = "from the future"
	e.xadd(t, "e", rawEnvelope(t, fields))
	resp := readResponse(t, e, reply)
	if code := fmt.Sprint(resp["c"]); code != fmt.Sprint(uint32(tunnel.FailedPrecondition)) {
		t.Errorf("code = %v, want FAILED_PRECONDITION (%d)", code, tunnel.FailedPrecondition)
	}
	if msg, _ := resp["msg"].(string); !strings.Contains(msg, "envelope version 4 is not supported") {
		t.Errorf("message = %q", msg)
	}
	e.settled(t)
	if r := e.deadLetterReasons(t); len(r) != 1 || !strings.Contains(r[0], "version 4") {
		t.Errorf("dead letters = %q", r)
	}
	if e.count("Echo") != 1 { // only the liveness probe
		t.Errorf("Echo ran %d times, want 1", e.count("Echo"))
	}
	e.stillServes(t)
}

func TestPayloadOfTheWrongMessageIsInvalidArgument(t *testing.T) {
	e := newEnv(t, envConfig{})
	// bytes that are not valid UTF-8 cannot be a proto3 string
	err := e.client.Invoke(context.Background(), method("Echo"), wrapperspb.Bytes([]byte{0xff, 0xfe}), new(wrapperspb.StringValue))
	if tunnel.CodeOf(err) != tunnel.InvalidArgument || !strings.Contains(err.Error(), "not a valid google.protobuf.StringValue") {
		t.Fatalf("err = %v, want INVALID_ARGUMENT naming the expected message", err)
	}
	e.stillServes(t)
}

func TestReplyToStreamGoneIsRecordedAndNothingIsCreated(t *testing.T) {
	e := newEnv(t, envConfig{})
	gone := "rpr:v1:{test.v1.Echo}:resp:departed-client"
	e.xadd(t, "e", rawEnvelope(t, validFields("20261129-TEST-1795995318695-BBBBBBBBBB", gone)))
	e.settled(t)
	waitFor(t, "the dropped response to be logged", func() bool {
		return strings.Contains(e.logs.String(), "response stream is gone")
	})
	if n, _ := e.rdb.Exists(context.Background(), gone).Result(); n != 0 {
		t.Error("server created the departed client's stream")
	}
	if e.count("Echo") != 2 { // liveness probe + this request: it ran, the answer had nowhere to go
		t.Errorf("Echo ran %d times, want 2", e.count("Echo"))
	}
	e.stillServes(t)
}

func TestReplyToOutsideTheServiceIsRefused(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.xadd(t, "e", rawEnvelope(t, validFields("20261129-TEST-1795995318695-CCCCCCCCCC", "somebody:else:stream")))
	e.settled(t)
	if r := e.deadLetterReasons(t); len(r) != 1 || !strings.Contains(r[0], "is not a response stream") {
		t.Fatalf("dead letters = %q", r)
	}
	if n, _ := e.rdb.Exists(context.Background(), "somebody:else:stream").Result(); n != 0 {
		t.Error("server wrote to a key outside rpr")
	}
	if e.count("Echo") != 1 {
		t.Errorf("Echo ran %d times, want 1 (liveness probe only)", e.count("Echo"))
	}
}

func TestExpiredRequestIsNeverExecuted(t *testing.T) {
	e := newEnv(t, envConfig{})
	reply := replyStream(t, e, "late")
	fields := validFields("20261129-TEST-1795995318695-DDDDDDDDDD", reply)
	fields["dl"] = time.Now().Add(-time.Second).UnixMilli()
	e.xadd(t, "e", rawEnvelope(t, fields))
	e.settled(t)
	if e.count("Echo") != 1 {
		t.Errorf("Echo ran %d times, want 1 (liveness probe only)", e.count("Echo"))
	}
	waitFor(t, "the skip to be logged", func() bool {
		return strings.Contains(e.logs.String(), "deadline passed before a worker took the request; not executed")
	})
	if n, _ := e.rdb.XLen(context.Background(), reply).Result(); n != 0 {
		t.Errorf("an expired request was answered (%d responses)", n)
	}
	if st := e.rdb.HGet(context.Background(), stateKey("20261129-TEST-1795995318695-DDDDDDDDDD"), "state").Val(); st != "TIMEOUT" {
		t.Errorf("state = %q, want TIMEOUT (so a late worker or the caller's arbiter sees it was never run)", st)
	}
}

// TestEnvelopeBulkOutsideThePayloadIsBounded: the payload has its limit,
// and so has the rest of an envelope. Metadata over MaxMetadataBytes is
// refused by the client before sending; an envelope sent some other way
// with bulk metadata, or bulk anywhere, is answered RESOURCE_EXHAUSTED
// and dead-lettered with the reason, and the server serves on.
func TestEnvelopeBulkOutsideThePayloadIsBounded(t *testing.T) {
	e := newEnv(t, envConfig{})
	bulk := strings.Repeat("x", tunnel.MaxMetadataBytes)
	_, err := e.call(context.Background(), "Echo", "bulky", tunnel.WithHeader("x-bulk", bulk))
	if tunnel.CodeOf(err) != tunnel.ResourceExhausted || !tunnel.NotExecuted(err) || !strings.Contains(err.Error(), "MaxMetadataBytes") {
		t.Fatalf("call with %d bytes of metadata: %v, want RESOURCE_EXHAUSTED, NotExecuted, naming MaxMetadataBytes", len(bulk), err)
	}

	for i, size := range []int{tunnel.MaxMetadataBytes + 1, tunnel.DefaultMaxMessageBytes + 2*tunnel.MaxMetadataBytes} {
		reply := replyStream(t, e, fmt.Sprintf("bulk%d", i))
		fields := validFields(fmt.Sprintf("20261129-TEST-1795995318695-BULK%06d", i), reply)
		fields["h"] = map[string][]string{"x-bulk": {strings.Repeat("y", size)}}
		e.xadd(t, "e", rawEnvelope(t, fields))
		resp := readResponse(t, e, reply)
		msg, _ := resp["msg"].(string)
		if code := fmt.Sprint(resp["c"]); code != fmt.Sprint(uint32(tunnel.ResourceExhausted)) || !strings.Contains(msg, "limit") {
			t.Errorf("envelope with %d bytes of metadata: answered %v %q, want RESOURCE_EXHAUSTED naming the limit", size, code, msg)
		}
	}
	e.settled(t)
	if r := e.deadLetterReasons(t); len(r) != 2 || !strings.Contains(r[0], "metadata") || !strings.Contains(r[1], "envelope is") {
		t.Errorf("dead letters = %.200q, want the two refusals with their reasons", r)
	}
	// What a dead letter keeps of an entry it could not run is bounded.
	entries, err := e.rdb.XRange(context.Background(), deadLetters, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range entries {
		if kept := len(fmt.Sprint(m.Values["e"])); kept > 64<<10 {
			t.Errorf("a dead letter keeps %d bytes of its entry, want at most 64 KiB", kept)
		}
	}
	if e.count("bulky") != 0 || e.count("Echo") != 1 {
		t.Errorf("handler ran: bulky %d, Echo %d; want only the liveness probe", e.count("bulky"), e.count("Echo"))
	}
	e.stillServes(t)
}
