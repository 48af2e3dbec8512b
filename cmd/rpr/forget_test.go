package main

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redistest"
)

// TestForget: rpr forget refuses a live service and removes a dead one's
// leftovers, which rpr ls then no longer lists.
func TestForget(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "forget-live")
	rdb := rs.Client(t)
	ctx := context.Background()
	// What a run of an old demo left: a silent worker and a schema.
	rdb.HSet(ctx, "rpr:v1:{acme.old.v1.Gone}:workers", "gone-1", `{"host":"h","pid":1,"started_ms":1,"beat_ms":1}`)
	rdb.Set(ctx, "rpr:v1:{acme.old.v1.Gone}:schema", "x", 0)
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "rpr:v1:{acme.old.v1.Gone}:req", Values: []any{"e", "a request"}})

	if out, code := runRPR(t, "forget", "--redis", rs.URL(), greeterService); code != 1 || !strings.Contains(out, "live workers") {
		t.Errorf("forget of a live service: exit %d:\n%s", code, out)
	}
	out, code := runRPR(t, "forget", "--redis", rs.URL(), "acme.old.v1.Gone")
	if code != 0 || !strings.Contains(out, "removed 2 keys") || !strings.Contains(out, "kept rpr:v1:{acme.old.v1.Gone}:req") {
		t.Errorf("forget: exit %d:\n%s", code, out)
	}
	out, _ = runRPR(t, "ls", "--redis", rs.URL())
	if strings.Contains(out, "acme.old.v1.Gone") {
		t.Errorf("rpr ls still lists the forgotten service:\n%s", out)
	}
}
