package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redistest"
)

// TestAnswerKeepsRecordsOnlyWithRetention runs the fast path's answer
// script both ways on a real Redis: it answers each caller whose stream
// exists (and not one that is gone), retires every entry, and, only with a
// retention, writes each request's record under its id with that TTL — a
// gone caller's too, since the call did finish.
func TestAnswerKeepsRecordsOnlyWithRetention(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	shard := NewKeyspace("").Shard("test.v1.Answer", 0)
	req, here, gone := shard.Requests(DefaultLane), shard.Responses("here"), shard.Responses("gone")
	if err := rdb.XGroupCreateMkStream(ctx, req, WorkersGroup, "$").Err(); err != nil {
		t.Fatal(err)
	}
	for _, retention := range []time.Duration{0, time.Minute} {
		if err := rdb.XGroupCreateMkStream(ctx, here, ResponseGroup, "$").Err(); err != nil {
			t.Fatal(err)
		}
		var entries []string
		for range 2 {
			entries = append(entries, rdb.XAdd(ctx, &redis.XAddArgs{Stream: req, Values: []any{"e", "request"}}).Val())
		}
		rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: WorkersGroup, Consumer: "w1", Streams: []string{req, ">"}})

		a := NewAnswer(req, retention, 2)
		a.Add(here, entries[0], []byte("resp-1"), shard.Done("id-1"), []byte(`{"method":"M"}`))
		a.Add(gone, entries[1], []byte("resp-2"), shard.Done("id-2"), []byte(`{"method":"M","code":5}`))
		Run(ctx, rdb, &a.Call)
		out, err := a.Result()
		if err != nil || len(out) != 2 || out[0] != 1 || out[1] != 0 {
			t.Fatalf("retention %v: answer = %v, %v; want [1 0] (answered, caller gone)", retention, out, err)
		}
		if n, err := rdb.XLen(ctx, req).Result(); err != nil || n != 0 {
			t.Errorf("retention %v: %d entries left in the request stream", retention, n)
		}
		if n, err := rdb.Exists(ctx, gone).Result(); err != nil || n != 0 {
			t.Errorf("retention %v: the answer created a gone caller's stream", retention)
		}
		for _, id := range []string{"id-1", "id-2"} {
			got, err := rdb.Get(ctx, shard.Done(id)).Result()
			ttl := rdb.PTTL(ctx, shard.Done(id)).Val()
			switch {
			case retention == 0 && err != redis.Nil:
				t.Errorf("without retention, %s has a record: %q", id, got)
			case retention > 0 && (err != nil || got == "" || ttl <= 0 || ttl > retention):
				t.Errorf("with retention %v, %s's record: %q, %v, TTL %v", retention, id, got, err, ttl)
			}
		}
		rdb.Del(ctx, here)
	}
}

// TestAnswerStartReusesItsMemory runs one Answer for batch after batch of
// other sizes, with and without retention, as a server's completer does:
// each batch answers its own callers and retires its own entries, nothing
// of the batch before leaks into it, and starting a batch no bigger than
// an earlier one allocates nothing.
func TestAnswerStartReusesItsMemory(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	shard := NewKeyspace("").Shard("test.v1.Answer", 0)
	req, here := shard.Requests(DefaultLane), shard.Responses("here")
	for _, stream := range []struct{ key, group string }{{req, WorkersGroup}, {here, ResponseGroup}} {
		if err := rdb.XGroupCreateMkStream(ctx, stream.key, stream.group, "$").Err(); err != nil {
			t.Fatal(err)
		}
	}
	a := new(Answer)
	for i, batch := range []struct {
		size      int
		retention time.Duration
	}{{3, 0}, {1, 0}, {4, time.Minute}, {2, 0}} {
		var entries []string
		for range batch.size {
			entries = append(entries, rdb.XAdd(ctx, &redis.XAddArgs{Stream: req, Values: []any{"e", "request"}}).Val())
		}
		rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: WorkersGroup, Consumer: "w1", Streams: []string{req, ">"}})
		a.Start(req, batch.retention, batch.size)
		for k, entry := range entries {
			a.Add(here, entry, fmt.Appendf(nil, "batch %d answer %d", i, k), shard.Done(fmt.Sprintf("id-%d-%d", i, k)), []byte("record"))
		}
		Run(ctx, rdb, &a.Call)
		out, err := a.Result()
		if err != nil || len(out) != batch.size || slices.ContainsFunc(out, func(v int64) bool { return v != 1 }) {
			t.Fatalf("batch %d: answer = %v, %v; want %d times 1", i, out, err, batch.size)
		}
		if n := rdb.XLen(ctx, req).Val(); n != 0 {
			t.Fatalf("batch %d: %d entries left in the request stream", i, n)
		}
		answers := rdb.XRange(ctx, here, "-", "+").Val()
		if len(answers) != batch.size {
			t.Fatalf("batch %d: %d answers on the caller's stream; want %d", i, len(answers), batch.size)
		}
		for k, m := range answers {
			if want := fmt.Sprintf("batch %d answer %d", i, k); m.Values["e"] != want {
				t.Errorf("batch %d: answer %d is %q; want %q", i, k, m.Values["e"], want)
			}
		}
		rdb.XTrimMaxLen(ctx, here, 0)
	}
	resp := []byte("response")
	allocs := testing.AllocsPerRun(100, func() {
		a.Start(req, 0, 3)
		for range 3 {
			a.Add(here, "1-1", resp, "", nil)
		}
	})
	if allocs != 0 {
		t.Errorf("starting and filling a batch no bigger than an earlier one allocated %v times; want 0", allocs)
	}
}
