package store

import (
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/wire"
)

// TestDeadLetterHeldAtTheCap runs the scripts of a hold one by one: the
// complete script holds a dead letter for a stream at its cap (the
// request in the retry set as its next attempt, its letter in the state,
// its entry retired, the stream untouched); the begin script gives that
// request back as 'held' and retires a duplicate of its key as
// 'finished'; once there is room the held letter is written with its own
// fields and the state forgets it.
func TestDeadLetterHeldAtTheCap(t *testing.T) {
	w := newIsolationWorld(t)
	dlq, retries, st := w.shard.DeadLetters(), w.shard.Retries(DefaultLane), w.shard.State("k1")
	if err := w.rdb.XAdd(w.ctx, &redis.XAddArgs{Stream: dlq, Values: []any{"e", "an older letter"}}).Err(); err != nil {
		t.Fatal(err)
	}
	entry := w.deliver(t, 1)[0]
	w.rdb.HSet(w.ctx, st, "state", "PROCESSING", "worker", "w1", "entry", entry, "attempt", 3)
	letter := wire.DeadLetter{Reason: "attempts exhausted (3 of 3)", Code: "UNAVAILABLE", ID: "r1", Attempts: 3}
	dead := func(entry string, held bool) *Complete {
		c := NewComplete(w.req, retries, "w1", 1, 1)
		c.Add(&Completion{Action: ActionDead, EntryID: entry, State: st, Final: wire.StateDead, TTL: time.Hour,
			Target: dlq, Envelope: []byte("original"), Letter: letter, LetterHeld: held, Hold: []byte("next attempt"), HoldBackoff: time.Millisecond})
		Run(w.ctx, w.rdb, &c.Call)
		return c
	}
	if out, err := dead(entry, false).Result(); err != nil || !slices.Equal(out, []int64{Held}) {
		t.Fatalf("complete at the cap: %v, %v; want Held", out, err)
	}
	if n := w.rdb.XLen(w.ctx, dlq).Val(); n != 1 {
		t.Errorf("the dead-letter stream has %d entries, want its 1 (nothing added, nothing trimmed)", n)
	}
	if held := w.rdb.ZRange(w.ctx, retries, 0, -1).Val(); !slices.Equal(held, []string{"next attempt"}) {
		t.Errorf("retry set %v, want the next attempt held", held)
	}
	if got := w.rdb.HMGet(w.ctx, st, "state", wire.StateHeld).Val(); got[0] != "FAILED" || got[1] == nil {
		t.Errorf("state %v, want FAILED with the letter held", got)
	}
	if left := w.pending(t); len(left) != 0 {
		t.Errorf("entries left in the request stream: %v", left)
	}

	// It comes back (attempt 4), with a duplicate of its key (attempt 1).
	back := w.deliver(t, 2)
	b := NewBegin(w.shard, w.req, "w1", time.Minute, time.Second, time.Minute, 2)
	deadline := time.Now().Add(time.Minute).UnixMilli()
	b.Add(BeginEntry{State: st, EntryID: back[1], Deadline: deadline, Attempt: 1})
	b.Add(BeginEntry{State: st, EntryID: back[0], Deadline: deadline, Attempt: 4})
	Run(w.ctx, w.rdb, &b.Call)
	if got, err := b.Result(); err != nil || got[0].Verdict != VerdictFinished || got[1].Verdict != VerdictHeld {
		t.Fatalf("begin of a duplicate and the held request: %+v, %v; want finished, held", got, err)
	}

	// Room: the held letter lands with its own fields.
	w.rdb.Del(w.ctx, dlq)
	if out, err := dead(back[0], true).Result(); err != nil || !slices.Equal(out, []int64{Written}) {
		t.Fatalf("complete with room: %v, %v; want Written", out, err)
	}
	letters := w.rdb.XRange(w.ctx, dlq, "-", "+").Val()
	if len(letters) != 1 {
		t.Fatalf("%d letters, want the held one", len(letters))
	}
	if got := wire.ParseDeadLetter(letters[0].Values); got.Reason != letter.Reason || got.ID != "r1" || got.Attempts != 3 {
		t.Errorf("the letter written: %+v; want the held fields %+v", got, letter)
	}
	if n := w.rdb.HExists(w.ctx, st, wire.StateHeld).Val(); n {
		t.Error("the state still holds the letter after it was written")
	}
	if state := w.rdb.HGet(w.ctx, st, "state").Val(); state != wire.StateDead {
		t.Errorf("state %q, want %s", state, wire.StateDead)
	}
}
