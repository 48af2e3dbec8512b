package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/internal/redistest"
)

// TestFlaggedFormsRunAtMaxmemory checks the two dialects at Redis's
// maxmemory (noeviction): LoadScripts finds Redis 7's flags; a heartbeat
// in its flagged form beats, while in its plain form (what every script
// is on Redis 6.2) it is refused with OOM, having written nothing; and a
// script that adds new data (enqueue) is refused whatever the dialect.
func TestFlaggedFormsRunAtMaxmemory(t *testing.T) {
	rdb := redistest.Start(t, redistest.WithConfig("maxmemory-policy", "noeviction")).Client(t)
	ctx := context.Background()
	d, err := LoadScripts(ctx, rdb)
	if err != nil || d != DialectFlags {
		t.Fatalf("LoadScripts: %v, %v; want %v (the tests run Redis 7)", d, err, DialectFlags)
	}
	shard := NewKeyspace(DefaultPrefix).Shard("test.v1.Full", 0)
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.ConfigSet(context.Background(), "maxmemory", "0") })

	plain := NewHeartbeat(shard.Workers(), "w1", []byte("{}"), time.Minute, time.Hour, "", "", "")
	Run(ctx, rdb, &plain.Call)
	var se *ScriptError
	if _, err := plain.Result(); !errors.As(err, &se) || se.Code != "OOM" {
		t.Errorf("plain heartbeat at maxmemory: %v; want refused with OOM", err)
	}
	if n, _ := rdb.HLen(ctx, shard.Workers()).Result(); n != 0 {
		t.Errorf("the refused heartbeat wrote %d records", n)
	}

	flagged := NewHeartbeat(shard.Workers(), "w1", []byte("{}"), time.Minute, time.Hour, "", "", "")
	flagged.Use(d)
	Run(ctx, rdb, &flagged.Call)
	if _, err := flagged.Result(); err != nil {
		t.Errorf("flagged heartbeat at maxmemory: %v; want it to beat", err)
	}
	if n, _ := rdb.HLen(ctx, shard.Workers()).Result(); n != 1 {
		t.Errorf("after the flagged heartbeat: %d records, want 1", n)
	}

	q := NewEnqueue(shard.Requests(""), shard.Retries(""), 1)
	q.Use(d)
	q.Add(100, 0, []byte("envelope"))
	Run(ctx, rdb, &q.Call)
	if _, err := q.Result(); !errors.As(err, &se) || se.Code != "OOM" {
		t.Errorf("enqueue at maxmemory with %v: %v; want refused with OOM", d, err)
	}
}

// TestCompileErrorIsRecognised pins the answer LoadScripts and Recover take
// for "this Redis cannot run the flagged form": Redis 6.2 fails to compile
// a script whose first line is a shebang with the same "Error compiling
// script" it gives any script that does not compile, which this Redis is
// asked here.
func TestCompileErrorIsRecognised(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	err := rdb.ScriptLoad(context.Background(), "return +").Err()
	if !isCompileError(err) {
		t.Fatalf("SCRIPT LOAD of a script that does not compile: %v; want isCompileError", err)
	}
	if isCompileError(rdb.ScriptLoad(context.Background(), oomShebang+"return 1").Err()) {
		t.Fatal("this Redis cannot compile a flagged script; the tests need Redis 7")
	}
}
