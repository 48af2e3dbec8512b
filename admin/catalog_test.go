package admin

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// scanCounter is a go-redis hook counting SCAN commands: each discovery of
// services sends at least one.
type scanCounter struct{ scans atomic.Int64 }

func (c *scanCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *scanCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "scan" {
			c.scans.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *scanCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestCatalogCachesDiscovery: the metrics' service list is discovered once
// and reused until it is DiscoveryInterval old (on a fake clock), then
// discovered again, finding a service that appeared meanwhile; a pinned
// list is never discovered.
func TestCatalogCachesDiscovery(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	counter := &scanCounter{}
	rdb.AddHook(counter)
	ctx := context.Background()
	beat := func(service string) {
		t.Helper()
		if err := rdb.HSet(ctx, "rpr:v1:{"+service+"}:workers", "w1", `{"host":"h","pid":1}`).Err(); err != nil {
			t.Fatal(err)
		}
	}
	beat("a.v1.A")

	now := time.Unix(1_800_000_000, 0)
	cat := newCatalog(New(rdb, Options{}), nil, time.Minute)
	cat.now = func() time.Time { return now }
	get := func(when string, want ...string) {
		t.Helper()
		services, caps, err := cat.get(ctx)
		if err != nil || !slices.Equal(services, want) {
			t.Fatalf("%s: services %q, %v; want %q", when, services, err, want)
		}
		for _, s := range want {
			if caps[s] != tunnel.DefaultMaxBacklog {
				t.Errorf("%s: cap of %s (no schema) = %d, want %d", when, s, caps[s], tunnel.DefaultMaxBacklog)
			}
		}
	}
	get("first collection", "a.v1.A")
	scans := counter.scans.Load()
	if scans == 0 {
		t.Fatal("the first collection did not discover the services")
	}

	beat("b.v1.B")
	now = now.Add(time.Minute - time.Millisecond)
	get("within the interval", "a.v1.A")
	if n := counter.scans.Load(); n != scans {
		t.Errorf("a collection within the interval scanned %d times; want the cached list", n-scans)
	}
	now = now.Add(time.Millisecond)
	get("once the interval is over", "a.v1.A", "b.v1.B")
	if counter.scans.Load() == scans {
		t.Error("a collection after the interval did not discover the services again")
	}

	pinned := newCatalog(New(rdb, Options{}), []string{"x.v1.X"}, 0)
	if pinned.every != DefaultDiscoveryInterval {
		t.Errorf("interval 0 means %v, want DefaultDiscoveryInterval", pinned.every)
	}
	scans = counter.scans.Load()
	if services, _, err := pinned.get(ctx); err != nil || !slices.Equal(services, []string{"x.v1.X"}) || counter.scans.Load() != scans {
		t.Errorf("pinned: %q, %v, %d scans; want x.v1.X without a scan", services, err, counter.scans.Load()-scans)
	}
}
