package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/internal/wire"
)

// TestEveryScriptRunsInOneClusterSlot runs every Lua script rpr has, built
// by its typed builder with the keys rpr gives it for shard 2 of a sharded
// service and the v2 lane, against a real Redis Cluster: none may fail
// with CROSSSLOT (or touch a key of another slot), in its plain form nor
// in its flagged one. A script without a case here fails the test, so new
// scripts are checked too.
func TestEveryScriptRunsInOneClusterSlot(t *testing.T) {
	cluster := redistest.StartCluster(t)
	rdb := cluster.Client(t)
	ctx := context.Background()
	const service, worker, group = "test.v1.Slots", "w1", WorkersGroup
	keys := NewKeyspace(DefaultPrefix)
	shard := keys.Shard(service, 2)
	req, retry, dlq := shard.Requests("v2"), shard.Retries("v2"), shard.DeadLetters()
	resp, workers := shard.Responses("client-1"), shard.Workers()

	// A request stream with two delivered entries, a response stream, and
	// one dead letter to replay.
	if err := rdb.XGroupCreateMkStream(ctx, req, group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XGroupCreateMkStream(ctx, resp, ResponseGroup, "$").Err(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: req, Values: []any{wire.Field, "x"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	read, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: worker, Streams: []string{req, ">"}, Count: 2}).Result()
	if err != nil || len(read[0].Messages) != 2 {
		t.Fatalf("read the test entries: %v %v", read, err)
	}
	entry, entry2 := read[0].Messages[0].ID, read[0].Messages[1].ID
	letter, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: dlq, Values: []any{wire.Field, "x"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute).UnixMilli()

	calls := []*Call{
		&NewHeartbeat(workers, worker, []byte("{}"), time.Minute, time.Hour, "", "", "").Call,
		&NewHeartbeat(keys.Workers(service), worker, []byte("{}"), time.Minute, time.Hour, keys.ShardCount(service), keys.Schemas(service), "abc").Call,
		&func() *Begin {
			b := NewBegin(shard, req, worker, 5*time.Second, 10*time.Second, 5*time.Second, 1)
			b.Add(BeginEntry{State: shard.State("a"), ReplyTo: resp, EntryID: entry, Deadline: deadline, Attempt: 1})
			return b
		}().Call,
		&func() *Extend {
			e := NewExtend(req, worker, 5*time.Second)
			e.Add(entry, shard.State("a"))
			return e
		}().Call,
		&func() *Complete {
			c := NewComplete(req, retry, worker, 10, 1)
			// with a finished record and the id in the state, as a unary
			// call of a server that keeps finished calls has, and an async
			// request with a key of its own
			c.Add(&Completion{Action: ActionReply, EntryID: entry, State: shard.State("a"), Final: wire.StateSuccess,
				TTL: time.Minute, Response: []byte("resp"), Target: resp, ID: "a-id",
				Record: []byte(`{"key":"a"}`), RecordKey: shard.Done("a-id"), RecordTTL: time.Minute})
			return c
		}().Call,
		// the unary fast path's completion: the answer only, no state
		&func() *Answer {
			a := NewAnswer(req, 0, 1)
			a.Add(resp, entry, []byte("resp"), "", nil)
			return a
		}().Call,
		// and with the finished record of a server that keeps them
		&func() *Answer {
			a := NewAnswer(req, time.Minute, 1)
			a.Add(resp, entry2, []byte("resp"), shard.Done("b"), []byte(`{"method":"M"}`))
			return a
		}().Call,
		// the async fast path's success: the done marker only
		&func() *Done {
			d := NewDone(req, worker, time.Minute, 1)
			d.Add(shard.State("e"), entry2, 1)
			return d
		}().Call,
		&NewArbiter(shard, req, keys.Cancels(service), "b", "b", entry2, wire.StateTimeout, time.Second).Call,
		&NewTermProbe(req).Call,
		&NewReply(resp, []byte("resp")).Call,
		&NewDeadLetterEntry(shard, req, entry2, "x", wire.DeadLetter{Reason: "bad", Code: "INVALID_ARGUMENT", Worker: worker, Lane: "v2"}, 10).Call,
		&func() *Enqueue {
			e := NewEnqueue(req, retry, 1)
			e.Add(100, 0, []byte("x"))
			e.Add(100, time.Now().UnixMilli()-1, []byte("y"))
			return e
		}().Call,
		&NewMoveDue(retry, req, 10).Call,
		&NewJanitor(req, time.Second).Call,
		&func() *Replay {
			r := NewReplay(shard, req)
			r.Add(letter, shard.State("c"), []byte("x"))
			return r
		}().Call,
		&func() *Limit {
			l := NewLimit()
			l.Add(keys.RateKey(service, "r:caller"), "log", 10, time.Second, 0)
			return l
		}().Call,
		&NewRaiseShards(keys.ShardCount(service), 3).Call,
		&NewMoveLane(shard, "v2", "", 10, false).Call,
		&NewAcceptStream(req, entry, shard.State("d"), resp, time.Minute, []byte("accept")).Call,
		&NewOpenInbox(shard.Inbox(worker), time.Minute).Call,
		&NewHandoff(req, "w2", entry, keys.Handoffs(service), []byte("{}")).Call,
		&NewEndStream(shard.State("d"), resp, wire.StateSuccess, time.Minute, []byte("resp"), 2, 1).Call,
	}
	covered := map[*script]bool{}
	for _, c := range calls {
		covered[c.script] = true
		slot := redistest.Slot(c.keys[0])
		for _, k := range c.keys {
			if redistest.Slot(k) != slot {
				t.Errorf("script %s with keys %v: %s is in slot %d, %s in %d", c.script.name, c.keys, c.keys[0], slot, k, redistest.Slot(k))
			}
		}
		Run(ctx, rdb, c)
		if err := c.Err(); err != nil && err != redis.Nil {
			t.Errorf("script %s with keys %v: %v", c.script.name, c.keys, err)
		}
		if c.script.oom != nil {
			// Its flagged form (Redis 7 checks a flagged script's keys
			// against the slots they are in, and runs it at maxmemory)
			c.Use(DialectFlags)
			Run(ctx, rdb, c)
			if err := c.Err(); err != nil && err != redis.Nil {
				t.Errorf("script %s (flagged form) with keys %v: %v", c.script.name, c.keys, err)
			}
		}
	}
	if d, err := LoadScripts(ctx, rdb); err != nil || d != DialectFlags {
		t.Errorf("LoadScripts on the cluster: %v, %v; want %v", d, err, DialectFlags)
	}
	for _, s := range scripts {
		if !covered[s] {
			t.Errorf("script %s has no case in this test: add one", s.name)
		}
	}
}
