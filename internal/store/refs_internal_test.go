package store

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// discard is a Commander that sends nothing.
type discard struct{}

func (discard) Process(context.Context, redis.Cmder) error { return nil }

// The batch calls size refs for every argument and key they refer to, so
// that Queue never grows it: growing copies every reference taken so far.
func TestBatchCallsNeverGrowTheirRefs(t *testing.T) {
	const size = 64
	answer := NewAnswer("rq", 0, size)
	kept := NewAnswer("rq", time.Minute, size)
	done := NewDone("rq", "w", time.Minute, size)
	enqueue := NewEnqueue("rq", "retries", size)
	for range size {
		answer.Add("resp", "1-1", []byte("r"), "", nil)
		kept.Add("resp", "1-1", []byte("r"), "done", []byte("rec"))
		done.Add("state", "1-1", 1)
		enqueue.Add(1000, 0, []byte("env"))
	}
	for name, c := range map[string]*Call{"answer": &answer.Call, "answer keeping records": &kept.Call, "done": &done.Call, "enqueue": &enqueue.Call} {
		first, capacity := unsafe.SliceData(c.refs), cap(c.refs)
		c.Queue(context.Background(), discard{})
		if unsafe.SliceData(c.refs) != first || cap(c.refs) != capacity {
			t.Errorf("%s: refs grew from %d to %d to take the keys", name, capacity, cap(c.refs))
		}
	}
}
