package store

import (
	"context"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/internal/wire"
)

// TestInboxAndSendFrames checks a worker's inbox from both ends: opening
// it creates an empty stream that keeps the frames already in it when
// opened again, and SendFrames writes a batch of frames as one entry, and
// nothing at all to an inbox that is gone.
func TestInboxAndSendFrames(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	inbox := NewKeyspace("").Shard("test.v1.Inbox", 0).Inbox("w1")

	send := func(frames ...string) int64 {
		t.Helper()
		raw := make([][]byte, len(frames))
		for i, f := range frames {
			raw[i] = []byte(f)
		}
		s := NewSendFrames(inbox, raw)
		s.Queue(ctx, rdb)
		n, err := s.Result()
		if err != nil {
			t.Fatalf("SendFrames: %v", err)
		}
		return n
	}
	open := func() {
		t.Helper()
		o := NewOpenInbox(inbox, time.Minute)
		Run(ctx, rdb, &o.Call)
		if err := o.Err(); err != nil {
			t.Fatalf("OpenInbox: %v", err)
		}
	}

	if n := send("f1"); n != CallerGone {
		t.Fatalf("SendFrames to a missing inbox = %d, want CallerGone", n)
	}
	if n, err := rdb.Exists(ctx, inbox).Result(); err != nil || n != 0 {
		t.Fatal("SendFrames created the inbox")
	}
	open()
	if n, err := rdb.XLen(ctx, inbox).Result(); err != nil || n != 0 {
		t.Fatalf("a new inbox holds %d entries, want none", n)
	}
	if n := send("ab", "cd", "e"); n != Written {
		t.Fatalf("SendFrames = %d, want Written", n)
	}
	open() // again: keeps the entry
	entries := rdb.XRange(ctx, inbox, "-", "+").Val()
	if len(entries) != 1 || entries[0].Values[wire.StreamField] != "abcde" {
		t.Fatalf("inbox holds %+v, want one entry with the three frames back to back", entries)
	}
	if ttl := rdb.PTTL(ctx, inbox).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("inbox TTL = %v, want up to a minute", ttl)
	}
}
