package store

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/internal/wire"
)

// TestScriptErrorsHideLua checks that an error Redis raises inside a
// script reaches the caller as a *ScriptError naming the script and what
// to do, without Lua's internals (the script's SHA, "@user_script:N").
func TestScriptErrorsHideLua(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	shard := NewKeyspace(DefaultPrefix).Shard("test.v1.Errors", 0)
	// Something other than rpr wrote a string where a state hash goes.
	if err := rdb.Set(ctx, shard.State("r1"), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	a := NewArbiter(shard, shard.Requests(""), "cancels", "r1", "r1", "1-1", wire.StateTimeout, time.Second)
	Run(ctx, rdb, &a.Call)
	_, err := a.Result()
	var se *ScriptError
	if !errors.As(err, &se) || se.Script != "arbiter" || se.Code != "WRONGTYPE" {
		t.Fatalf("error = %v (%T), want a *ScriptError of the arbiter with code WRONGTYPE", err, err)
	}
	if strings.Contains(err.Error(), "@user_script") || luaLocation.MatchString(err.Error()) || regexp.MustCompile(`[0-9a-f]{40}`).MatchString(err.Error()) {
		t.Errorf("error %q shows Lua's internals (a script SHA or line)", err)
	}
	if !strings.Contains(err.Error(), "prefix of its own") {
		t.Errorf("error %q does not say what to do", err)
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		t.Errorf("error %q does not unwrap to Redis's own error", err)
	}
	if !se.Started {
		t.Errorf("a WRONGTYPE raised by redis.call inside the script has Started false")
	}

	// At maxmemory, Redis refuses the script's first write (the enqueue
	// script's XADD): it wrote nothing.
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	q := NewEnqueue(shard.Requests(""), shard.Retries(""), 1)
	q.Add(100, 0, []byte("envelope"))
	Run(ctx, rdb, &q.Call)
	_, err = q.Result()
	rdb.ConfigSet(ctx, "maxmemory", "0")
	if !errors.As(err, &se) || se.Code != "OOM" || se.Started {
		t.Errorf("under OOM: %v (%+v), want a *ScriptError with code OOM that never started", err, se)
	}
}

// TestArbiterWithoutConsumerGroup checks that a request stream whose
// consumer group is gone (Redis lost it) is settled, not an error: no
// worker can have read the entry, so the caller's mark wins.
func TestArbiterWithoutConsumerGroup(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	shard := NewKeyspace(DefaultPrefix).Shard("test.v1.NoGroup", 0)
	stream := shard.Requests("")
	id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{wire.Field, "x"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	a := NewArbiter(shard, stream, "cancels", "r1", "r1", id, wire.StateTimeout, time.Second)
	Run(ctx, rdb, &a.Call)
	v, err := a.Result()
	if err != nil || !v.Won || v.Found != wire.StateTimeout {
		t.Fatalf("Result = %+v, %v; want the mark to win", v, err)
	}
	if n, err := rdb.XLen(ctx, stream).Result(); err != nil || n != 0 {
		t.Errorf("the request is still queued (%d entries): it could run after its caller gave up", n)
	}
}
