package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/internal/wire"
)

// TestArbiterOutcomes runs the arbiter against each place a request can
// be: queued and undelivered (withdrawn: the mark wins), delivered to a
// worker (marked, left to the worker), and gone (finished).
func TestArbiterOutcomes(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	shard := NewKeyspace(DefaultPrefix).Shard("test.v1.Arbiter", 0)
	stream := shard.Requests("")
	if err := rdb.XGroupCreateMkStream(ctx, stream, WorkersGroup, "$").Err(); err != nil {
		t.Fatal(err)
	}
	add := func() string {
		t.Helper()
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{wire.Field, "x"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	delivered := add()
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: WorkersGroup, Consumer: "w1", Streams: []string{stream, ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	queued := add()
	gone := add()
	if err := rdb.XDel(ctx, stream, gone).Err(); err != nil {
		t.Fatal(err)
	}
	probe := NewTermProbe(stream)
	Run(ctx, rdb, &probe.Call)
	term, err := probe.Result()
	if err != nil || term == "" {
		t.Fatalf("term probe = %q, %v; want the master's term", term, err)
	}
	for _, tc := range []struct {
		rid, entry, found, term string
		won                     bool
	}{
		{"queued", queued, wire.StateTimeout, term, true},
		{"delivered", delivered, ArbiterDelivered, "", false},
		{"gone", gone, ArbiterFinished, "", false},
		{"queued", queued, wire.StateTimeout, term, false}, // its mark, found
	} {
		a := NewArbiter(shard, stream, "cancels", tc.rid, tc.rid, tc.entry, wire.StateTimeout, time.Second)
		Run(ctx, rdb, &a.Call)
		v, err := a.Result()
		if want := (Settled{Won: tc.won, Found: tc.found, Term: tc.term}); err != nil || v != want {
			t.Errorf("%s: Result = %+v, %v; want %+v", tc.rid, v, err, want)
		}
	}
	if got := rdb.XRange(ctx, stream, "-", "+").Val(); len(got) != 1 || got[0].ID != delivered {
		t.Errorf("stream holds %v, want only the delivered entry %s", got, delivered)
	}
}

// TestArbiterRefusedXPendingIsAnError checks that an XPENDING Redis
// refuses for another reason than a missing group (an ACL user without
// it) fails the arbiter rather than counting the request as undelivered:
// that would withdraw, and report "not executed", a request a worker has.
func TestArbiterRefusedXPendingIsAnError(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	shard := NewKeyspace(DefaultPrefix).Shard("test.v1.Refused", 0)
	stream := shard.Requests("")
	if err := rdb.XGroupCreateMkStream(ctx, stream, WorkersGroup, "$").Err(); err != nil {
		t.Fatal(err)
	}
	id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{wire.Field, "x"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: WorkersGroup, Consumer: "w1", Streams: []string{stream, ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	err = rdb.Do(ctx, "ACL", "SETUSER", "noxpending", "on", ">pw", "~"+shard.Tag+":*",
		"+@connection", "+evalsha", "+eval", "+time", "+hget", "+hset", "+pexpire", "+xrange", "+xdel", "+publish", "allchannels").Err()
	if err != nil {
		t.Fatal(err)
	}
	limited := redis.NewClient(&redis.Options{Addr: rs.Addr(), Username: "noxpending", Password: "pw"})
	t.Cleanup(func() { _ = limited.Close() })

	a := NewArbiter(shard, stream, "cancels", "r1", "r1", id, wire.StateTimeout, time.Second)
	Run(ctx, limited, &a.Call)
	if v, err := a.Result(); err == nil {
		t.Fatalf("Result = %+v, nil; want the refused XPENDING as an error", v)
	}
	if n := rdb.XLen(ctx, stream).Val(); n != 1 {
		t.Errorf("the delivered request was withdrawn (%d entries left)", n)
	}
}
