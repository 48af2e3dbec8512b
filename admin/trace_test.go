package admin_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestTraceShardedService: Client.Trace and Service.Trace find a request of a 3-shard
// service in whatever shard and lane holds it: queued in lane v3 (which a
// route names and no server serves), and done (state only) in the default
// lane; among them requests of shard 2.
func TestTraceShardedService(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	startLane(t, rdb, "", 3)
	client := newLanesClient(t, rs.Client(t))
	setRoute(t, handle(rdb).Service(lanesService).Routes(), lanesService+"/Job", "v3")
	job := &lanesDesc(3).Methods[1]

	// Shards are picked at random: enqueue until shard 2 has some (60
	// requests all missing it would happen once in 10^10 runs).
	shards := map[int]int{}
	for i := 0; i < 6 || shards[2] == 0 && i < 60; i++ {
		r, err := client.Enqueue(ctx, job, wrapperspb.String(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		tr, err := handle(rdb).Trace(ctx, r.RequestID)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Service != lanesService || tr.Shards != 3 || tr.Lane != "v3" || tr.Queued == nil || tr.Queued.Method != lanesService+"/Job" {
			t.Fatalf("trace of queued request %s: %+v; want it queued in lane v3 of %s, 3 shards", r.RequestID, tr, lanesService)
		}
		// The entry is where the trace says: in its shard's v3 stream.
		stream := fmt.Sprintf("rpr:v1:{%s#%d}:req:v3", lanesService, tr.Shard)
		if tr.Shard == 0 {
			stream = "rpr:v1:{" + lanesService + "}:req:v3"
		}
		if got := rdb.XRange(ctx, stream, tr.Queued.ID, tr.Queued.ID).Val(); len(got) != 1 {
			t.Fatalf("trace of %s: entry %s (shard %d) is not in %s", r.RequestID, tr.Queued.ID, tr.Shard, stream)
		}
		shards[tr.Shard]++
	}
	if shards[2] == 0 {
		t.Fatalf("requests traced per shard: %v; want some in shard 2", shards)
	}

	// Async jobs that ran (sent to the default lane, which a server
	// serves): only their state is left (the key's done marker), in their
	// shard. (Until shard 2 has some, as above.)
	answered := map[int]int{}
	for i := 0; i < 6 || answered[2] == 0 && i < 60; i++ {
		r, err := client.Enqueue(ctx, job, wrapperspb.String(fmt.Sprint("done-", i)), tunnel.WithLane(tunnel.DefaultLane))
		if err != nil {
			t.Fatal(err)
		}
		id := r.RequestID
		var tr *admin.RequestTrace
		waitFor(t, "job "+id+" done", func() bool {
			tr, err = handle(rdb).Service(lanesService).Trace(ctx, id)
			return err == nil && tr.State == "SUCCESS"
		})
		if tr.Service != lanesService || tr.Queued != nil || tr.Retry != nil {
			t.Fatalf("trace of done job %s: %+v; want only its SUCCESS state", id, tr)
		}
		state := fmt.Sprintf("rpr:v1:{%s#%d}:st:%s", lanesService, tr.Shard, id)
		if tr.Shard == 0 {
			state = "rpr:v1:{" + lanesService + "}:st:" + id
		}
		if rdb.Exists(ctx, state).Val() != 1 {
			t.Fatalf("trace of %s says shard %d, but %s does not exist", id, tr.Shard, state)
		}
		answered[tr.Shard]++
	}
	if answered[2] == 0 {
		t.Fatalf("done jobs traced per shard: %v; want some in shard 2", answered)
	}
}
