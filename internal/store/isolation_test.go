package store

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redistest"
)

// isolationWorld is a request stream with entries delivered to worker w1,
// a response stream and a key holding a string in the response namespace.
type isolationWorld struct {
	ctx      context.Context
	rdb      *redis.Client
	shard    Shard
	req      string
	here     string // a response stream
	squatted string // a string where a response stream could be
}

func newIsolationWorld(t *testing.T) *isolationWorld {
	t.Helper()
	rs := redistest.Start(t)
	w := &isolationWorld{ctx: context.Background(), rdb: rs.Client(t), shard: NewKeyspace("").Shard("test.v1.Isolation", 0)}
	w.req, w.here, w.squatted = w.shard.Requests(DefaultLane), w.shard.Responses("here"), w.shard.Responses("squatted")
	if err := w.rdb.XGroupCreateMkStream(w.ctx, w.req, WorkersGroup, "$").Err(); err != nil {
		t.Fatal(err)
	}
	if err := w.rdb.XGroupCreateMkStream(w.ctx, w.here, ResponseGroup, "$").Err(); err != nil {
		t.Fatal(err)
	}
	if err := w.rdb.Set(w.ctx, w.squatted, "foreign", 0).Err(); err != nil {
		t.Fatal(err)
	}
	return w
}

// deliver adds n entries and delivers them to worker w1.
func (w *isolationWorld) deliver(t *testing.T, n int) []string {
	t.Helper()
	var entries []string
	for range n {
		entries = append(entries, w.rdb.XAdd(w.ctx, &redis.XAddArgs{Stream: w.req, Values: []any{"e", "request"}}).Val())
	}
	if err := w.rdb.XReadGroup(w.ctx, &redis.XReadGroupArgs{Group: WorkersGroup, Consumer: "w1", Streams: []string{w.req, ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	return entries
}

// pending returns the entries still in the request stream.
func (w *isolationWorld) pending(t *testing.T) []string {
	t.Helper()
	msgs, err := w.rdb.XRange(w.ctx, w.req, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	return ids
}

// TestAnswerBadReplyToFailsItsEntryAlone: in one answer script call, an
// answer whose reply-to holds a string is reported (ReplyWrongType) and
// its entry left pending, while the good answers of the call are written
// and their entries retired.
func TestAnswerBadReplyToFailsItsEntryAlone(t *testing.T) {
	w := newIsolationWorld(t)
	for _, retention := range []time.Duration{0, time.Minute} {
		entries := w.deliver(t, 3)
		a := NewAnswer(w.req, retention, 3)
		a.Add(w.here, entries[0], []byte("resp-1"), w.shard.Done("id-1"), []byte(`{}`))
		a.Add(w.squatted, entries[1], []byte("resp-2"), w.shard.Done("id-2"), []byte(`{}`))
		a.Add(w.here, entries[2], []byte("resp-3"), w.shard.Done("id-3"), []byte(`{}`))
		Run(w.ctx, w.rdb, &a.Call)
		out, err := a.Result()
		if err != nil || !slices.Equal(out, []int64{Written, ReplyWrongType, Written}) {
			t.Fatalf("retention %v: answer = %v, %v; want [1 -2 1]", retention, out, err)
		}
		if n := w.rdb.XLen(w.ctx, w.here).Val(); n != 2 {
			t.Errorf("retention %v: %d answers written, want 2", retention, n)
		}
		if p := w.pending(t); !slices.Equal(p, entries[1:2]) {
			t.Errorf("retention %v: entries left %v, want only the bad one %s", retention, p, entries[1])
		}
		if v := w.rdb.Get(w.ctx, w.squatted).Val(); v != "foreign" {
			t.Errorf("retention %v: the foreign key now holds %q", retention, v)
		}
		w.rdb.XDel(w.ctx, w.req, entries[1])
		w.rdb.Del(w.ctx, w.here)
		w.rdb.XGroupCreateMkStream(w.ctx, w.here, ResponseGroup, "$")
	}
}

// TestBeginDecidesEachEntryAlone: in one begin script call, an entry whose
// state key holds a string, one whose stored answer would go to a reply-to
// holding a string and one whose deadline is far out of range do not keep
// a good entry from being claimed; the foreign keys are named and left
// alone, and the far deadline's state is kept MaxStateTTL.
func TestBeginDecidesEachEntryAlone(t *testing.T) {
	w := newIsolationWorld(t)
	entries := w.deliver(t, 4)
	deadline := time.Now().Add(time.Minute).UnixMilli()
	foreignState, answered := w.shard.State("foreign"), w.shard.State("answered")
	w.rdb.Set(w.ctx, foreignState, "foreign", 0)
	w.rdb.HSet(w.ctx, answered, "state", "SUCCESS", "resp", "stored")
	b := NewBegin(w.shard, w.req, "w1", 5*time.Second, 10*time.Second, 5*time.Second, 4)
	b.Add(BeginEntry{State: foreignState, ReplyTo: w.here, EntryID: entries[0], Deadline: deadline, Attempt: 1})
	b.Add(BeginEntry{State: answered, ReplyTo: w.squatted, EntryID: entries[1], Deadline: deadline, Attempt: 1})
	b.Add(BeginEntry{State: w.shard.State("far"), ReplyTo: w.here, EntryID: entries[2], Deadline: math.MaxInt64,
		Idempotent: true, Attempt: 1, TakenFrom: "ghost", Fast: true})
	b.Add(BeginEntry{State: w.shard.State("good"), ReplyTo: w.here, EntryID: entries[3], Deadline: deadline, Attempt: 1})
	Run(w.ctx, w.rdb, &b.Call)
	got, err := b.Result()
	want := []Decision{{VerdictForeign, foreignState}, {VerdictForeign, w.squatted}, {VerdictRerun, "ghost"}, {VerdictRun, ""}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("begin = %v, %v; want %v", got, err, want)
	}
	if ttl := w.rdb.PTTL(w.ctx, w.shard.State("far")).Val(); ttl < MaxStateTTL-time.Hour || ttl > MaxStateTTL+time.Minute {
		t.Errorf("far deadline's state TTL %v, want about MaxStateTTL (%v)", ttl, MaxStateTTL)
	}
	if st := w.rdb.HGet(w.ctx, w.shard.State("good"), "state").Val(); st != "PROCESSING" {
		t.Errorf("good entry's state %q, want PROCESSING", st)
	}
	if p := w.pending(t); len(p) != 4 {
		t.Errorf("entries left %v, want all four (foreign ones to be dead-lettered, claimed ones running)", p)
	}
	if v := w.rdb.Get(w.ctx, foreignState).Val(); v != "foreign" {
		t.Errorf("the foreign state key now holds %q", v)
	}
}

// TestCompleteBadKeysFailTheirEntryAlone: in one complete script call, a
// reply whose reply-to holds a string (its state is recorded, nothing is
// sent) and an outcome whose state key was overwritten with a string are
// reported and their entries left pending, while a good reply is written
// and its entry retired.
func TestCompleteBadKeysFailTheirEntryAlone(t *testing.T) {
	w := newIsolationWorld(t)
	entries := w.deliver(t, 3)
	states := []string{w.shard.State("a"), w.shard.State("b"), w.shard.State("c")}
	for i, st := range states {
		w.rdb.HSet(w.ctx, st, "state", "PROCESSING", "worker", "w1", "entry", entries[i], "attempt", 1)
	}
	w.rdb.Set(w.ctx, states[1], "foreign", 0)
	c := NewComplete(w.req, w.shard.Retries(""), "w1", 0, 3)
	for i, target := range []string{w.squatted, w.here, w.here} {
		c.Add(&Completion{Action: ActionReply, EntryID: entries[i], State: states[i], Final: "SUCCESS",
			TTL: time.Duration(math.MaxInt64), Response: []byte("resp"), Target: target})
	}
	Run(w.ctx, w.rdb, &c.Call)
	out, err := c.Result()
	if err != nil || !slices.Equal(out, []int64{ReplyWrongType, StateWrongType, Written}) {
		t.Fatalf("complete = %v, %v; want [-2 -3 1]", out, err)
	}
	if p := w.pending(t); !slices.Equal(p, entries[:2]) {
		t.Errorf("entries left %v, want the two bad ones %v", p, entries[:2])
	}
	if st := w.rdb.HGet(w.ctx, states[0], "state").Val(); st != "SUCCESS" {
		t.Errorf("the undeliverable reply's state %q, want SUCCESS recorded", st)
	}
	if n := w.rdb.XLen(w.ctx, w.here).Val(); n != 1 {
		t.Errorf("%d answers written, want 1", n)
	}
	if v := w.rdb.Get(w.ctx, states[1]).Val(); v != "foreign" {
		t.Errorf("the foreign state key now holds %q", v)
	}
}
