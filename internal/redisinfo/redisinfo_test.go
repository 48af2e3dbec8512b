package redisinfo_test

import (
	"context"
	"testing"

	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/internal/redistest"
)

// TestReadCountsCommandsButNotItself runs 10 commands between two samples
// of a real redis-server: the growth is exactly 10, however many INFOs ran.
func TestReadCountsCommandsButNotItself(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	before, err := redisinfo.Read(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := rdb.Incr(ctx, "n").Err(); err != nil {
			t.Fatal(err)
		}
	}
	after, err := redisinfo.Read(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Sub(before); d.Commands != 10 {
		t.Errorf("counted %d commands, want the 10 INCRs", d.Commands)
	}
	if after.CPU <= 0 || after.UsedMemory <= 0 {
		t.Errorf("sample %+v: want CPU and memory read", after)
	}
}
