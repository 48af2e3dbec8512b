package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redistest"
)

// TestJanitorTrimsOnlyWhatEveryGroupAcknowledged runs the janitor script on a
// stream with acknowledged, pending and undelivered entries, and with a
// second group that has read nothing: it removes exactly the entries below
// the oldest one some group still needs.
func TestJanitorTrimsOnlyWhatEveryGroupAcknowledged(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	const stream = "rpr:v1:{test.v1.Janitor}:req"
	hour := time.Hour.Milliseconds()
	janitor := func(idleMs int64) (trimmed, forgotten int64) {
		t.Helper()
		call := NewJanitor(stream, time.Duration(idleMs)*time.Millisecond)
		Run(ctx, rdb, &call.Call)
		trimmed, forgotten, err := call.Result()
		if err != nil {
			t.Fatalf("janitor: %v", err)
		}
		return trimmed, forgotten
	}
	if trimmed, _ := janitor(hour); trimmed != 0 {
		t.Fatalf("trimmed %d entries of a stream that does not exist", trimmed)
	}
	var ids []string
	for range 10 {
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"e", "x"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if trimmed, _ := janitor(hour); trimmed != 0 {
		t.Fatalf("trimmed %d entries of a stream without groups", trimmed)
	}
	if err := rdb.XGroupCreate(ctx, stream, WorkersGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	read := func(consumer string, n int64) {
		t.Helper()
		group := WorkersGroup
		if consumer == "c3" {
			group = "audit"
		}
		if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{stream, ">"}, Count: n, Block: -1}).Err(); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
	}
	read("c1", 3) // ids[0..2] to c1
	read("c2", 3) // ids[3..5] to c2; ids[6..9] undelivered
	if err := rdb.XAck(ctx, stream, WorkersGroup, ids[0], ids[1], ids[2], ids[4], ids[5]).Err(); err != nil {
		t.Fatal(err)
	}
	// ids[3] is still pending: everything below it may go, nothing else.
	if trimmed, _ := janitor(hour); trimmed != 3 {
		t.Fatalf("trimmed %d entries, want the 3 acknowledged below the oldest pending", trimmed)
	}
	if err := rdb.XAck(ctx, stream, WorkersGroup, ids[3]).Err(); err != nil {
		t.Fatal(err)
	}
	// Now only the undelivered ids[6..9] remain needed.
	if trimmed, _ := janitor(hour); trimmed != 3 {
		t.Fatalf("trimmed %d entries, want the 3 delivered and acknowledged", trimmed)
	}
	if first := rdb.XRangeN(ctx, stream, "-", "+", 1).Val(); len(first) != 1 || first[0].ID != ids[6] {
		t.Fatalf("first entry left %v, want the first undelivered %s", first, ids[6])
	}
	// A second group that has read nothing protects everything.
	if err := rdb.XGroupCreate(ctx, stream, "audit", "0").Err(); err != nil {
		t.Fatal(err)
	}
	read("c2", 4)
	if err := rdb.XAck(ctx, stream, WorkersGroup, ids[6], ids[7], ids[8], ids[9]).Err(); err != nil {
		t.Fatal(err)
	}
	if trimmed, _ := janitor(hour); trimmed != 0 {
		t.Fatalf("trimmed %d entries the audit group has not read", trimmed)
	}
	if n := rdb.XLen(ctx, stream).Val(); n != 4 {
		t.Fatalf("%d entries left, want 4", n)
	}
	// Consumers with nothing pending are forgotten once idle long enough;
	// none of them before.
	if _, forgotten := janitor(hour); forgotten != 0 {
		t.Fatalf("forgot %d consumers idle for less than an hour", forgotten)
	}
	read("c3", 1) // audit's c3 keeps an entry pending
	time.Sleep(5 * time.Millisecond)
	if _, forgotten := janitor(1); forgotten != 2 {
		t.Fatalf("forgot %d consumers, want c1 and c2 (nothing pending), not c3", forgotten)
	}
}
