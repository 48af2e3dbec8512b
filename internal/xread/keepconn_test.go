package xread_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/internal/xread"
)

// A Reader that keeps its connection reads on one connection, read after
// read, instead of taking one from the pool (and checking it) each time;
// when that connection breaks, the read on it fails, the next takes a
// new one and reads what the stream holds, and Close gives the
// connection back to the pool.
func TestReaderKeepsItsConnection(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	if err := rdb.XGroupCreateMkStream(ctx, "s", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	r := xread.NewReader(rdb, "g", "c", "s", true)
	r.KeepConn()
	add := func(v string) {
		t.Helper()
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []string{"f", v}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	readOne := func() ([]xread.Entry, error) { return r.Read(ctx, 10, 10*time.Millisecond) }

	add("warm")
	if _, err := readOne(); err != nil { // the connection is taken here
		t.Fatal(err)
	}
	taken := rdb.PoolStats().Hits + rdb.PoolStats().Misses
	for i := range 20 {
		add("v")
		if msgs, err := readOne(); err != nil || len(msgs) != 1 {
			t.Fatalf("read %d: %d entries, %v; want 1", i, len(msgs), err)
		}
	}
	if _, err := readOne(); !errors.Is(err, redis.Nil) {
		t.Fatalf("read of an empty stream: %v; want redis.Nil", err)
	}
	// The 20 XADDs took one each; the 21 reads none.
	if now := rdb.PoolStats().Hits + rdb.PoolStats().Misses; now-taken != 20 {
		t.Fatalf("20 adds and 21 reads took %d connections from the pool; want 20 (the Reader keeps its own)", now-taken)
	}

	// Break the kept connection: the read on it fails, the next one reads.
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	add("after")
	if _, err := readOne(); err == nil || errors.Is(err, redis.Nil) {
		t.Fatalf("read on a killed connection: %v; want its error", err)
	}
	msgs, err := readOne()
	if err != nil || len(msgs) != 1 || msgs[0].Fields[1] != "after" {
		t.Fatalf("read after the failed one: %v, %v; want the entry added meanwhile", msgs, err)
	}

	idle := rdb.PoolStats().IdleConns
	r.Close()
	if got := rdb.PoolStats().IdleConns; got != idle+1 {
		t.Fatalf("idle connections after Close: %d; want %d (the kept one back in the pool)", got, idle+1)
	}
}

// A Reader of a client with ConnMaxLifetime gives its connection back
// once it has kept it that long, so that the pool can retire it: Redis
// accepts no connection while the Reader reads within the lifetime, and
// one (the pool's new connection) at each read after it. Both are told
// by the lifetime alone, whatever the machine's speed: an hour outlasts
// the test, a millisecond has passed by the next read.
func TestReaderRenewsItsConnectionAfterItsLifetime(t *testing.T) {
	srv := redistest.Start(t)
	stats := srv.Client(t) // counts connections on one of its own
	ctx := context.Background()
	accepted := func() int64 {
		t.Helper()
		info, err := stats.Info(ctx, "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(redisinfo.Field(info, "total_connections_received"), 10, 64)
		return n
	}
	// readsOpen has a Reader of a client with lifetime read six entries,
	// each one added just before, with pause between the reads after the
	// first, and returns the connections Redis accepted for the last five.
	readsOpen := func(stream string, lifetime, pause time.Duration) int64 {
		t.Helper()
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ConnMaxLifetime: lifetime})
		defer func() { _ = rdb.Close() }()
		if err := rdb.XGroupCreateMkStream(ctx, stream, "g", "0").Err(); err != nil {
			t.Fatal(err)
		}
		r := xread.NewReader(rdb, "g", "c", stream, true)
		r.KeepConn()
		defer r.Close()
		// An entry is there before each read, which returns at once (one
		// that finds none waits for Redis's timer, about 100 ms).
		read := func() {
			t.Helper()
			if err := stats.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"f", "v"}}).Err(); err != nil {
				t.Fatal(err)
			}
			if msgs, err := r.Read(ctx, 10, 10*time.Millisecond); err != nil || len(msgs) != 1 {
				t.Fatalf("read: %d entries, %v; want 1", len(msgs), err)
			}
		}
		read()
		first := accepted()
		for range 5 {
			time.Sleep(pause)
			read()
		}
		return accepted() - first
	}
	if n := readsOpen("within", time.Hour, 0); n != 0 {
		t.Fatalf("reads within the lifetime opened %d connections; want none", n)
	}
	if n := readsOpen("after", time.Millisecond, 5*time.Millisecond); n != 5 {
		t.Fatalf("five reads, each after the lifetime, opened %d connections; want 5 (one each)", n)
	}
}
