package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redistest"
)

// TestTermChangesOnRestartAndPromotion checks that a master's term is
// stable while it serves, and changes when it restarts and when a
// replica is promoted in its place, which are the moments its last
// writes can be lost.
func TestTermChangesOnRestartAndPromotion(t *testing.T) {
	ctx := context.Background()
	master := redistest.Start(t)
	replica := redistest.Start(t)
	key := NewKeyspace(DefaultPrefix).Shard("test.v1.Term", 0).Requests("")
	term := func(rdb *redis.Client) string {
		t.Helper()
		p := NewTermProbe(key)
		Run(ctx, rdb, &p.Call)
		got, err := p.Result()
		if err != nil || got == "" {
			t.Fatalf("term probe = %q, %v", got, err)
		}
		return got
	}
	mrdb, rrdb := master.Client(t), replica.Client(t)
	first := term(mrdb)
	if again := term(mrdb); again != first {
		t.Fatalf("term changed between two probes of a serving master: %s, then %s", first, again)
	}
	if err := rrdb.ReplicaOf(ctx, "127.0.0.1", fmt.Sprint(master.Port())).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(rrdb.Info(ctx, "replication").Val(), "master_link_status:up") {
		if time.Now().After(deadline) {
			t.Fatal("the replica did not sync with its master within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := rrdb.ReplicaOf(ctx, "no", "one").Err(); err != nil {
		t.Fatal(err)
	}
	if promoted := term(rrdb); promoted == first {
		t.Errorf("a promoted replica has its old master's term %s", first)
	}
	master.Restart(t)
	if restarted := term(master.Client(t)); restarted == first {
		t.Errorf("a restarted master kept its term %s", first)
	}
}
