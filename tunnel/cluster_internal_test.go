package tunnel

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redistest"
)

// TestEveryScriptRunsInOneClusterSlot runs every Lua script rpr has, with
// the keys rpr gives it for shard 2 of a sharded service and the v2 lane,
// against a real Redis Cluster: none may fail with CROSSSLOT (or touch a
// key of another slot). A script added to allScripts without a case here
// fails the test, so new scripts are checked too.
func TestEveryScriptRunsInOneClusterSlot(t *testing.T) {
	cluster := redistest.StartCluster(t)
	rdb := cluster.Client(t)
	ctx := context.Background()
	const service, worker, group = "test.v1.Slots", "w1", workersGroup
	keys := keyspace{prefix: DefaultPrefix}
	shard := keys.shard(service, 2)
	req, retry, dlq := shard.requests("v2"), shard.retries("v2"), shard.deadLetters()
	resp, workers := shard.responses("client-1"), shard.workers()

	// A request stream with two delivered entries, a response stream, and
	// one dead letter to replay.
	if err := rdb.XGroupCreateMkStream(ctx, req, group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XGroupCreateMkStream(ctx, resp, responseGroup, "$").Err(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: req, Values: []any{envelopeField, "x"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	read, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: worker, Streams: []string{req, ">"}, Count: 2}).Result()
	if err != nil || len(read[0].Messages) != 2 {
		t.Fatalf("read the test entries: %v %v", read, err)
	}
	entry, entry2 := read[0].Messages[0].ID, read[0].Messages[1].ID
	letter, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: dlq, Values: []any{envelopeField, "x"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	deadline := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)

	cases := []struct {
		script *redis.Script
		keys   []string
		args   []any
	}{
		{heartbeatScript, []string{workers}, []any{worker, "{}", 60000}},
		{beginScript, []string{req, workers, shard.state("a"), resp},
			[]any{group, worker, 5000, 10000, 5000, entry, deadline, 0, 1, 1, ""}},
		{extendScript, []string{req, shard.state("a")}, []any{group, worker, 5000, entry, "s"}},
		{completeScript, []string{req, resp, shard.state("a")},
			[]any{group, worker, entry, "reply", stateSuccess, 60000, "resp", "", ""}},
		// the unary fast path's completion: the answer only, no state
		{answerScript, []string{req, resp}, []any{group, entry, "resp"}},
		{arbiterScript, []string{shard.state("b"), req}, []any{"TIMEOUT", 1000, keys.cancels(service), "b", entry2, group}},
		{replyScript, []string{resp}, []any{"resp"}},
		{deadLetterScript, []string{req, dlq}, []any{group, entry2, "x", "bad", "INVALID_ARGUMENT", worker, "v2"}},
		{enqueueScript, []string{req, retry}, []any{100, 0, "x", 100, time.Now().UnixMilli() - 1, "y"}},
		{moveDueScript, []string{retry, req}, []any{10}},
		{janitorScript, []string{req}, []any{1000}},
		{replayScript, []string{dlq, req, shard.state("c")}, []any{letter, "x"}},
		{limitScript, []string{keys.rateKey(service, "r:caller")}, []any{"log", 10, 1_000_000, 0}},
		{raiseShardsScript, []string{keys.shardCount(service)}, []any{3}},
		{moveLaneScript, []string{req, shard.requests(""), retry, shard.retries("")}, []any{group, 10, "0"}},
	}
	covered := map[*redis.Script]bool{}
	for _, c := range cases {
		covered[c.script] = true
		slot := redistest.Slot(c.keys[0])
		for _, k := range c.keys {
			if redistest.Slot(k) != slot {
				t.Errorf("script with keys %v: %s is in slot %d, %s in %d", c.keys, c.keys[0], slot, k, redistest.Slot(k))
			}
		}
		if err := c.script.Run(ctx, rdb, c.keys, c.args...).Err(); err != nil && err != redis.Nil {
			t.Errorf("script with keys %v: %v", c.keys, err)
		}
	}
	for i, s := range allScripts {
		if !covered[s] {
			t.Errorf("allScripts[%d] has no case in this test: add one", i)
		}
	}
}
