package tunnel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/internal/logcapture"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestClusterEndToEnd runs rpr's features on a 3-master, 3-replica Redis
// Cluster reached through a redis:// URL listing seed nodes: unary calls
// and their deadlines on a 3-shard service, async requests with retries,
// dead letters and replay, a rate limit, routes to a second lane, draining
// a lane, and the shard count. Every Lua script and pipeline involved runs
// against the cluster; none may cross slots (logs are checked too).
func TestClusterEndToEnd(t *testing.T) {
	cluster := redistest.StartCluster(t)
	ctx := context.Background()
	logs := &logcapture.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	open := func() redis.UniversalClient {
		rdb := mustOpen(t, ctx, cluster.URL())
		if _, ok := rdb.(*redis.ClusterClient); !ok {
			t.Fatalf("Open(%s) = %T, want a cluster client", cluster.URL(), rdb)
		}
		return rdb
	}
	operator := open() // the operator's connection
	defer func() {
		for _, bad := range []string{"CROSSSLOT", "same slot", "non local key"} {
			if lines := logs.Lines(bad); len(lines) > 0 {
				t.Errorf("logs mention %q:\n%s", bad, strings.Join(lines, "\n"))
			}
		}
	}()

	// Servers: the lanes service sharded 3 ways, in the default lane and
	// in v2; the jobs service (async, retries, dead letters) unsharded.
	const shards = 3
	laneDefault := &laneServer{lane: tunnel.DefaultLane, runs: map[string]int{}}
	laneV2 := &laneServer{lane: "v2", runs: map[string]int{}}
	jobsImpl := &jobs{runs: map[string]int{}, attempts: map[string][]int{}, at: map[string]time.Time{}}
	jobsImpl.setFunc(func(_ context.Context, in *wrapperspb.StringValue) error {
		if strings.HasPrefix(in.GetValue(), "bad") {
			return tunnel.Permanent(errors.New("bad order"))
		}
		return nil
	})
	startServer(t, open(), tunnel.ServerOptions{Logger: logger, RetryPollInterval: 20 * time.Millisecond}, func(s *tunnel.Server) {
		s.RegisterService(lanesDesc(shards), laneDefault)
		s.RegisterService(&jobsDesc, jobsImpl)
	})
	startServer(t, open(), tunnel.ServerOptions{Lane: "v2", Logger: logger, RetryPollInterval: 20 * time.Millisecond}, func(s *tunnel.Server) {
		s.RegisterService(lanesDesc(shards), laneV2)
	})
	client, err := tunnel.NewClient(open(), tunnel.ClientOptions{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	waitFor(t, "both lanes live", func() bool {
		n := 0
		for _, st := range mustLanes(t, operator) {
			if st.LiveWorkers > 0 {
				n++
			}
		}
		return n == 2
	})

	// Unary calls spread over the 3 shards, whose keys live on at least
	// two masters (asked of the cluster: CLUSTER KEYSLOT, COUNTKEYSINSLOT).
	for i := range 90 {
		if got, err := which(ctx, client, shards); err != nil || got != tunnel.DefaultLane {
			t.Fatalf("call %d: %q, %v", i, got, err)
		}
	}
	masters := map[string]bool{}
	for shard := range shards {
		tag := lanesService
		if shard > 0 {
			tag = fmt.Sprintf("%s#%d", lanesService, shard)
		}
		key := "rpr:v1:{" + tag + "}:req"
		slot, err := operator.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		var inSlot int64
		err = operator.(*redis.ClusterClient).ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			n, err := node.ClusterCountKeysInSlot(ctx, int(slot)).Result()
			if n > 0 {
				inSlot += n
				masters[node.Options().Addr] = true
			}
			return err
		})
		if err != nil || inSlot == 0 {
			t.Fatalf("shard %d (%s, slot %d): %d keys in its slot, %v", shard, key, slot, inSlot, err)
		}
	}
	if len(masters) < 2 {
		t.Errorf("the 3 shards' keys are on %d master(s), want at least 2", len(masters))
	}

	// A call that outlives its deadline: the arbiter settles it.
	ctxShort, cancel := context.WithTimeout(ctx, time.Nanosecond)
	_, err = which(ctxShort, client, shards)
	cancel()
	if tunnel.CodeOf(err) != tunnel.DeadlineExceeded {
		t.Errorf("call past its deadline: %v, want DEADLINE_EXCEEDED", err)
	}

	// Routes: canary calls to v2, the rest to the default lane.
	table := lanesAdmin(operator).Routes()
	setRoute(t, table, lanesService+"/Which", "x-canary=true => v2")
	waitRouted(t, client, "v2", time.Now(), tunnel.WithHeader("x-canary", "true"))

	// Async requests: one succeeds, one is dead-lettered, then replayed
	// after the "fix"; one is delayed.
	if _, err := client.Enqueue(ctx, jobsMethod("Do"), wrapperspb.String("ok-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, jobsMethod("Do"), wrapperspb.String("ok-later"), tunnel.WithDelay(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, jobsMethod("Do"), wrapperspb.String("bad-1"), tunnel.WithIdempotencyKey("order-7")); err != nil {
		t.Fatal(err)
	}
	dlq := admin.New(operator, admin.Options{}).Service(jobsService).DeadLetters()
	var letters []admin.DeadLetter
	waitFor(t, "the bad request dead-lettered", func() bool {
		letters, err = dlq.List(ctx, admin.DeadLetterFilter{}, 0)
		return err == nil && len(letters) == 1
	})
	waitFor(t, "good and delayed requests ran", func() bool { return jobsImpl.count("ok-1") == 1 && jobsImpl.count("ok-later") == 1 })
	jobsImpl.setFunc(func(context.Context, *wrapperspb.StringValue) error { return nil })
	if res, err := dlq.Replay(ctx, letters, nil); err != nil || res.Replayed != 1 {
		t.Fatalf("Replay = %+v, %v", res, err)
	}
	waitFor(t, "the replayed request ran", func() bool { return jobsImpl.count("bad-1") == 2 })

	// A rate limit: 3 calls per minute for this caller, the 4th refused.
	if _, err := lanesAdmin(operator).Limits().Set(ctx, admin.LimitRule{Name: "few", Method: "*", Tier: "*", Limit: 3, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the limit refuses a call", func() bool {
		_, err := which(ctx, client, shards, tunnel.WithHeader("x-rpr-caller", "greedy"))
		return tunnel.CodeOf(err) == tunnel.ResourceExhausted
	})
	if _, err := lanesAdmin(operator).Limits().Remove(ctx, "few"); err != nil {
		t.Fatal(err)
	}

	// Drain a lane: async jobs routed to a lane without servers move to
	// the default lane and run there, once each.
	setRoute(t, table, lanesService+"/Job", "v3")
	waitFor(t, "jobs routed to v3", func() bool {
		_, err := client.Enqueue(ctx, &lanesDesc(shards).Methods[1], wrapperspb.String("probe"))
		return err == nil && laneQueued(t, operator, "v3") > 0
	})
	for i := range 30 {
		if _, err := client.Enqueue(ctx, &lanesDesc(shards).Methods[1], wrapperspb.String(fmt.Sprint("job-", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := table.Remove(ctx, lanesService+"/Job"); err != nil {
		t.Fatal(err)
	}
	res, err := lanesAdmin(operator).Drain(ctx, "v3", tunnel.DefaultLane)
	if err != nil || res.Left != 0 || res.Moved < 31 {
		t.Fatalf("Drain = %+v, %v; want at least 31 moved, none left", res, err)
	}
	waitFor(t, "drained jobs ran", func() bool { return len(laneDefault.executed()) >= 31 })
	// Once both lanes hold nothing, nothing is left to run (again).
	waitFor(t, "both lanes empty", func() bool {
		return laneQueued(t, operator, tunnel.DefaultLane) == 0 && laneQueued(t, operator, "v3") == 0
	})
	for v, n := range laneDefault.executed() {
		if n != 1 && v != "probe" { // each probe is a request of its own
			t.Errorf("job %s ran %d times", v, n)
		}
	}
	if got, err := lanesAdmin(operator).Shards(ctx); err != nil || got != shards {
		t.Errorf("Shards = %d, %v; want %d", got, err, shards)
	}
}

// laneQueued returns how many requests lane holds.
func laneQueued(t *testing.T, rdb redis.UniversalClient, lane string) int64 {
	for _, st := range mustLanes(t, rdb) {
		if st.Lane == lane {
			return st.Queued
		}
	}
	return 0
}
