package xread

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/bufpool"
	"github.com/rprtunnel/rpr/internal/redistest"
)

// go-redis writes a raw reply's lines with Write and copies each string's
// body with io.CopyN: a large body is read apart into a buffer of its own
// size, and parsing puts it back in its place.
func TestSinkReadsLargeBodiesApart(t *testing.T) {
	large := strings.Repeat("L", shareLimit+1)
	var s sink
	write := func(p string) { _, _ = s.Write([]byte(p)) }
	body := func(p string) {
		if _, err := io.CopyN(&s, strings.NewReader(p+"\r\n"), int64(len(p)+2)); err != nil {
			t.Fatal(err)
		}
	}
	write("*1\r\n*2\r\n$1\r\n")
	body("s")
	write("*1\r\n*2\r\n$3\r\n")
	body("1-0")
	write("*4\r\n$1\r\n")
	body("e")
	write("$" + strconv.Itoa(len(large)) + "\r\n")
	body(large)
	write("$1\r\n")
	body("x")
	write("$0\r\n")
	body("")
	if len(s.large) != 1 || len(s.buf) > 100 {
		t.Fatalf("%d bodies read apart, %d bytes in the buffer; want the large one apart", len(s.large), len(s.buf))
	}
	entries, err := parse(s.buf, s.large)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].ID != "1-0" || entries[0].Fields[1] != large || entries[0].Fields[2] != "x" || entries[0].Fields[3] != "" {
		t.Fatalf("entries %+v", entries)
	}
	s.reset()
	if len(s.buf) != 0 || len(s.large) != 0 {
		t.Fatal("reset kept the last reply")
	}
}

// Through go-redis, a large value too reaches the sink apart from the
// reply's framing: it is copied once, into the allocation its entry keeps.
func TestReaderReadsLargeValuesApart(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	if err := rdb.XGroupCreateMkStream(ctx, "s", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	value := strings.Repeat("v", 64<<10)
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []any{"e", value}}).Err(); err != nil {
		t.Fatal(err)
	}
	r := NewReader(rdb, "g", "c", "s", false)
	entries, err := r.Read(ctx, 1, 100*time.Millisecond)
	if err != nil || len(entries) != 1 {
		t.Fatalf("Read: %d entries, %v", len(entries), err)
	}
	if got, _ := entries[0].Value("e"); got != value || len(r.sink.large) != 1 || len(r.sink.buf) > 100 {
		t.Fatalf("value of %d bytes, %d read apart, %d bytes of framing; want the value read apart", len(got), len(r.sink.large), len(r.sink.buf))
	}
}

// A Reader that lends bodies reads a large value into a buffer of its
// pool, which its entry lists, and the next large value reuses a buffer
// given back; small values are not lent.
func TestReaderLendsLargeValues(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	if err := rdb.XGroupCreateMkStream(ctx, "s", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	var bodies bufpool.Pool
	r := NewReader(rdb, "g", "c", "s", false)
	r.LendBodies(&bodies)
	read := func(value string) Entry {
		t.Helper()
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []any{"e", value, "small", "x"}}).Err(); err != nil {
			t.Fatal(err)
		}
		entries, err := r.Read(ctx, 1, 100*time.Millisecond)
		if err != nil || len(entries) != 1 {
			t.Fatalf("Read: %d entries, %v", len(entries), err)
		}
		if got, _ := entries[0].Value("e"); got != value {
			t.Fatalf("value of %d bytes, want %d", len(got), len(value))
		}
		return entries[0]
	}
	first := read(strings.Repeat("a", 64<<10))
	if len(first.Lent) != 1 {
		t.Fatalf("%d buffers lent for one large value, want 1", len(first.Lent))
	}
	value, _ := first.Value("e")
	if unsafe.StringData(value) != unsafe.SliceData(*first.Lent[0]) {
		t.Fatal("the large value is not in the buffer its entry lists as lent")
	}
	bodies.Put(first.Lent[0])
	second := read(strings.Repeat("b", 64<<10))
	again, _ := second.Value("e")
	if len(second.Lent) != 1 || unsafe.StringData(again) != unsafe.StringData(value) {
		t.Fatal("the second large value did not reuse the buffer given back")
	}
	if small := read("tiny"); small.Lent != nil {
		t.Fatalf("an entry of small values lists %d lent buffers", len(small.Lent))
	}
}
