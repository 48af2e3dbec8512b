package xread_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/internal/xread"
)

// commandNames counts a client's stream reads (XREADGROUP, or XREAD
// with the read fields), raw and typed.
type commandNames struct {
	name       string
	typed, raw int
}

func (c *commandNames) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (c *commandNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmp.Or(c.name, "xreadgroup"); cmd.Name() == name {
			if _, ok := cmd.(*redis.RawWriteToCmd); ok {
				c.raw++
			} else {
				c.typed++
			}
		}
		return next(ctx, cmd)
	}
}

// Raw reads give what go-redis's typed reads give, in RESP2 and RESP3,
// small and large entries alike, and the raw path is the one taken.
func TestReaderReadsWhatGoRedisReads(t *testing.T) {
	srv := redistest.Start(t)
	for _, protocol := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", protocol), func(t *testing.T) {
			ctx := context.Background()
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: protocol})
			t.Cleanup(func() { _ = rdb.Close() })
			names := new(commandNames)
			rdb.AddHook(names)
			stream := fmt.Sprintf("s%d", protocol)
			if err := rdb.XGroupCreateMkStream(ctx, stream, "g", "0").Err(); err != nil {
				t.Fatal(err)
			}
			values := []string{"", "small", strings.Repeat("a", 16<<10), strings.Repeat("b", 64<<10+3), strings.Repeat("c", 1<<20)}
			var want []xread.Entry
			for i, v := range values {
				id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"e", v, "n", fmt.Sprint(i)}}).Result()
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, xread.Entry{ID: id, Fields: []string{"e", v, "n", fmt.Sprint(i)}})
			}
			r := xread.NewReader(rdb, "g", "c", stream, false)
			if got := r.MaxRawBlock(); got != 3*time.Second {
				t.Fatalf("MaxRawBlock with go-redis's default read timeout (5s) = %v, want 3s", got)
			}
			var got []xread.Entry
			for len(got) < len(values) {
				entries, err := r.Read(ctx, 2, 100*time.Millisecond)
				if err != nil {
					t.Fatalf("Read after %d entries: %v", len(got), err)
				}
				got = append(got, entries...)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("entries differ from what was added")
			}
			if _, err := r.Read(ctx, 2, 50*time.Millisecond); !errors.Is(err, redis.Nil) {
				t.Fatalf("Read of an empty stream: %v, want redis.Nil", err)
			}
			pending, err := rdb.XPending(ctx, stream, "g").Result()
			if err != nil || pending.Count != int64(len(values)) {
				t.Fatalf("pending after reads: %+v, %v; want all %d entries pending", pending, err, len(values))
			}
			if names.typed != 0 || names.raw != 4 {
				t.Fatalf("reads: %d raw, %d typed; want 4 raw, none typed", names.raw, names.typed)
			}
		})
	}
}

// What a raw read cannot do as go-redis would goes through go-redis's
// typed command: an error reply (here a missing group), and a block
// longer than the read timeout allows.
func TestReaderFallsBackToGoRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 2500 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	names := new(commandNames)
	rdb.AddHook(names)
	r := xread.NewReader(rdb, "g", "c", "missing", true)
	_, err := r.Read(ctx, 1, 10*time.Millisecond)
	if err == nil || !strings.HasPrefix(err.Error(), "NOGROUP") {
		t.Fatalf("Read without a group: %v, want go-redis's NOGROUP error", err)
	}
	if names.raw != 1 || names.typed != 1 {
		t.Fatalf("reads: %d raw, %d typed; want the raw one answered with an error, then the typed one", names.raw, names.typed)
	}

	if got := r.MaxRawBlock(); got != 500*time.Millisecond {
		t.Fatalf("MaxRawBlock with a 2.5s read timeout = %v, want 500ms", got)
	}
	if err := rdb.XGroupCreateMkStream(ctx, "s", "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	r = xread.NewReader(rdb, "g", "c", "s", true)
	if _, err := r.Read(ctx, 1, time.Second); !errors.Is(err, redis.Nil) {
		t.Fatalf("typed read of an empty stream: %v, want redis.Nil", err)
	}
	if names.typed != 2 {
		t.Fatalf("a block over MaxRawBlock took the raw path")
	}

	forever := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1})
	t.Cleanup(func() { _ = forever.Close() })
	if got := xread.NewReader(forever, "g", "c", "s", true).MaxRawBlock(); got != math.MaxInt64 {
		t.Fatalf("MaxRawBlock without a read timeout = %v, want no limit", got)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	if got := xread.NewReader(ring, "g", "c", "s", true).MaxRawBlock(); got >= 0 {
		t.Fatalf("MaxRawBlock of a client whose options it cannot read = %v, want none", got)
	}
}

// On a Cluster the raw read goes to the node of the stream's slot.
func TestReaderOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t)
	rdb := cluster.Client(t)
	ctx := context.Background()
	for _, stream := range []string{"{a}s", "{b}s", "{c}s"} {
		if err := rdb.XGroupCreateMkStream(ctx, stream, "g", "0").Err(); err != nil {
			t.Fatal(err)
		}
		id := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"e", stream}}).Val()
		entries, err := xread.NewReader(rdb, "g", "c", stream, false).Read(ctx, 10, 100*time.Millisecond)
		want := []xread.Entry{{ID: id, Fields: []string{"e", stream}}}
		if err != nil || !reflect.DeepEqual(entries, want) {
			t.Fatalf("%s: %+v, %v; want %+v", stream, entries, err, want)
		}
	}
}

// A Reader by id (XREAD) reads what was added after the id it is given,
// raw, and an error reply goes through go-redis's typed XREAD.
func TestStreamReaderReadsAfterAnID(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	names := &commandNames{name: "xread"}
	rdb.AddHook(names)
	ctx := context.Background()
	var want []xread.Entry
	for i := range 3 {
		id := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "inbox", Values: []any{"s", fmt.Sprint(i)}}).Val()
		want = append(want, xread.Entry{ID: id, Fields: []string{"s", fmt.Sprint(i)}})
	}
	r := xread.NewStreamReader(rdb, "inbox")
	got, err := r.ReadAfter(ctx, "0-0", 512, 100*time.Millisecond)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadAfter(0-0) = %+v, %v; want %+v", got, err, want)
	}
	got, err = r.ReadAfter(ctx, want[0].ID, 1, 100*time.Millisecond)
	if err != nil || !reflect.DeepEqual(got, want[1:2]) {
		t.Fatalf("ReadAfter(first, count 1) = %+v, %v; want %+v", got, err, want[1:2])
	}
	if _, err := r.ReadAfter(ctx, want[2].ID, 512, 50*time.Millisecond); !errors.Is(err, redis.Nil) {
		t.Fatalf("ReadAfter(last): %v, want redis.Nil", err)
	}
	if names.raw != 3 || names.typed != 0 {
		t.Fatalf("reads: %d raw, %d typed; want 3 raw", names.raw, names.typed)
	}

	if err := rdb.Set(ctx, "notastream", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = xread.NewStreamReader(rdb, "notastream").ReadAfter(ctx, "0-0", 1, 10*time.Millisecond)
	if err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
		t.Fatalf("ReadAfter of a string key: %v, want go-redis's WRONGTYPE error", err)
	}
	if names.raw != 4 || names.typed != 1 {
		t.Fatalf("reads: %d raw, %d typed; want the refused raw read made again typed", names.raw, names.typed)
	}
}
