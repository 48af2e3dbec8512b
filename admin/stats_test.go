package admin_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

const greeterService = "examples.greeter.v1.Greeter"

// inspect is Service.Stats on the default prefix, failing the test on
// error.
func inspect(t *testing.T, rdb redis.UniversalClient, service string) admin.ServiceStats {
	t.Helper()
	st, err := handle(rdb).Service(service).Stats(context.Background())
	if err != nil {
		t.Fatalf("Stats(%s): %v", service, err)
	}
	return st
}

// TestServiceStats follows a greeter service through its life: idle
// after some calls, busy with requests queued behind a running one,
// stopped with requests left in its stream, and with a request held by a
// worker that died and a dead letter.
func TestServiceStats(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	quiet := slog.New(slog.DiscardHandler)

	srv, err := tunnel.NewServer(rs.Client(t), tunnel.ServerOptions{Concurrency: 1, WorkerID: "inspect-w1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	greeterv1.RegisterGreeterServer(srv, greeter.Server{})
	serveCtx, stopServing := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serveCtx) }()
	stop := sync.OnceValue(func() error {
		stopServing()
		return <-served
	})
	t.Cleanup(func() { _ = stop() })
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	greeterClient := greeterv1.NewGreeterClient(client)
	ctx := context.Background()
	waitFor(t, "a live worker", func() bool { return inspect(t, rdb, greeterService).LiveWorkers == 1 })

	// Idle, after five calls: everything answered, nothing left.
	for range 5 {
		if _, err := greeterClient.SayHello(ctx, &greeterv1.SayHelloRequest{Name: "ada"}); err != nil {
			t.Fatal(err)
		}
	}
	idle := inspect(t, rdb, greeterService)
	want := admin.ServiceStats{Service: greeterService, Shards: 1, DeadLetterCap: tunnel.DefaultMaxDeadLetters, EntriesAdded: 5, Consumers: 1, LiveWorkers: 1, RedisTime: idle.RedisTime}
	if idle != want {
		t.Fatalf("idle:\n got %+v\nwant %+v", idle, want)
	}
	if skew := time.Since(idle.RedisTime); skew < -time.Minute || skew > time.Minute {
		t.Fatalf("RedisTime %v is far from now", idle.RedisTime)
	}

	// Busy: the one handler slot runs SlowHello; three calls queue behind it.
	callCtx, cancelCalls := context.WithCancel(ctx)
	defer cancelCalls()
	var calls sync.WaitGroup
	calls.Go(func() {
		_, _ = greeterClient.SlowHello(callCtx, &greeterv1.SlowHelloRequest{Name: "slow", DelayMs: 1500})
	})
	waitFor(t, "SlowHello running", func() bool { return inspect(t, rdb, greeterService).Pending == 1 })
	for range 3 {
		calls.Go(func() { _, _ = greeterClient.SayHello(callCtx, &greeterv1.SayHelloRequest{Name: "queued"}) })
	}
	var busy admin.ServiceStats
	// Redis's clock counts whole milliseconds, so the oldest pending
	// request may be 0ms old when all four were sent within one.
	waitFor(t, "three calls queued behind a pending one", func() bool {
		busy = inspect(t, rdb, greeterService)
		return busy.Lag == 3 && busy.OldestPending > 0
	})
	if busy.Length != 4 || busy.Pending != 1 || busy.EntriesAdded != 9 || busy.LiveWorkers != 1 || busy.OldestPending <= 0 || busy.OldestPending > time.Minute {
		t.Fatalf("busy: got %+v; want length 4, lag 3, pending 1, 9 added, 1 live worker, a positive oldest-pending age", busy)
	}
	rate, ok := busy.CallsPerSecond(idle)
	if !ok || rate <= 0 {
		t.Fatalf("CallsPerSecond(busy, idle) = %v, %v; want a positive rate", rate, ok)
	}

	// Stopped: the server finishes SlowHello and leaves. Whatever it did not
	// read stays in the stream, undelivered.
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	stopped := inspect(t, rdb, greeterService)
	if stopped.LiveWorkers != 0 || stopped.Pending != 0 || stopped.Lag != stopped.Length || stopped.EntriesAdded != 9 {
		t.Fatalf("stopped: got %+v; want no live worker, nothing pending, lag = length, 9 added", stopped)
	}
	cancelCalls()
	calls.Wait()
	// Callers that gave up withdrew their undelivered requests.
	if stopped = inspect(t, rdb, greeterService); stopped.Length != 0 || stopped.Lag != 0 {
		t.Fatalf("after the queued callers cancelled: got %+v; want their requests withdrawn", stopped)
	}

	// A worker that died holding a request, and a dead letter.
	requests := tunnel.DefaultPrefix + "{" + greeterService + "}:req"
	for range 2 {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: requests, Values: []string{"e", "not an envelope"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "dead-worker", Streams: []string{requests, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	dlq := tunnel.DefaultPrefix + "{" + greeterService + "}:dlq"
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: dlq, Values: []string{"reason", "test"}}).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	dead := inspect(t, rdb, greeterService)
	if dead.Length != stopped.Length+2 || dead.Pending != 1 || dead.Lag != dead.Length-1 || dead.Consumers != 2 ||
		dead.DeadLetters != 1 || dead.EntriesAdded != 11 || dead.OldestPending < 100*time.Millisecond {
		t.Fatalf("after a dead worker and a dead letter: got %+v (stopped: %+v); want 2 more entries, 1 pending at least 100ms old, 2 consumers, 1 dead letter, 11 added", dead, stopped)
	}

	// Discovery finds the service; the named-service form keeps the order.
	// Stats has a row per lane: the greeter has only the default one.
	all, err := handle(rdb).Stats(ctx)
	if err != nil || len(all) != 1 || all[0].Service != greeterService || all[0].Lane != tunnel.DefaultLane {
		t.Fatalf("Stats() = %+v, %v; want the greeter's default lane alone", all, err)
	}
	if lane := all[0]; lane.Length != dead.Length || lane.DeadLetters != 1 || lane.Shards != 1 {
		t.Fatalf("the greeter's default lane: %+v; want the service's figures (%+v)", lane, dead)
	}
	all, err = handle(rdb).Stats(ctx, "z.Missing", greeterService)
	if err != nil || len(all) != 2 || all[0].Service != "z.Missing" || all[1].Service != greeterService {
		t.Fatalf("Stats(z.Missing, greeter) = %+v, %v", all, err)
	}
}

// TestServiceStatsMissing: a service Redis knows nothing of is zeros, not
// an error; a stream without the group lags by its length (no server ever
// read it) and has no other group figures.
func TestServiceStatsMissing(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	st := inspect(t, rdb, "no.such.v1.Service")
	if want := (admin.ServiceStats{Service: "no.such.v1.Service", Shards: 1, RedisTime: st.RedisTime}); st != want || st.RedisTime.IsZero() {
		t.Fatalf("missing service: got %+v; want zeros with a Redis time", st)
	}

	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: "rpr:v1:{svc.One}:req", Values: []string{"e", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	got := inspect(t, rdb, "svc.One")
	if got.Length != 1 || got.EntriesAdded != 1 || got.Lag != 1 || got.Pending != 0 || got.Consumers != 0 || got.OldestPending != 0 {
		t.Fatalf("stream without a group: got %+v; want length 1, 1 added, lag 1, no other group figures", got)
	}
}

func TestCallsPerSecond(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(svc string, added int64, d time.Duration) admin.ServiceStats {
		return admin.ServiceStats{Service: svc, EntriesAdded: added, RedisTime: t0.Add(d)}
	}
	for _, c := range []struct {
		name      string
		prev, cur admin.ServiceStats
		rate      float64
		ok        bool
	}{
		{"steady", at("s", 100, 0), at("s", 350, 500*time.Millisecond), 500, true},
		{"idle", at("s", 100, 0), at("s", 100, time.Second), 0, true},
		{"no time", at("s", 100, 0), at("s", 200, 0), 0, false},
		{"counter reset", at("s", 100, 0), at("s", 3, time.Second), 0, false},
		{"other service", at("s", 100, 0), at("t", 200, time.Second), 0, false},
		{"other lane", at("s", 100, 0), func() admin.ServiceStats { s := at("s", 200, time.Second); s.Lane = "v2"; return s }(), 0, false},
	} {
		rate, ok := c.cur.CallsPerSecond(c.prev)
		if rate != c.rate || ok != c.ok {
			t.Errorf("%s: CallsPerSecond = %v, %v; want %v, %v", c.name, rate, ok, c.rate, c.ok)
		}
	}
}

// TestLaneStatsOfShardedService: a 3-shard service with a live server
// in the default lane, one in lane v2, and requests queued in lane v3,
// which a route names but no server serves: a row per lane, each summed
// over the shards, and their total.
func TestLaneStatsOfShardedService(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	startLane(t, rdb, "", 3)
	startLane(t, rdb, "v2", 3)
	client := newLanesClient(t, rs.Client(t))
	setRoute(t, handle(rdb).Service(lanesService).Routes(), lanesService+"/Job", "v3")
	job := &lanesDesc(3).Methods[1]
	const queued = 9
	for i := range queued {
		if _, err := client.Enqueue(ctx, job, wrapperspb.String(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	const calls, v2Calls = 6, 2
	for i := range calls {
		if got, err := which(ctx, client, 3); err != nil || got != tunnel.DefaultLane {
			t.Fatalf("call %d: %q, %v", i, got, err)
		}
	}
	for i := range v2Calls {
		if got, err := which(ctx, client, 3, tunnel.WithLane("v2")); err != nil || got != "v2" {
			t.Fatalf("call %d to v2: %q, %v", i, got, err)
		}
	}
	// A dead letter in shard 2 counts for the service, in every lane.
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "rpr:v1:{" + lanesService + "#2}:dlq", Values: []string{"reason", "test"}}).Err(); err != nil {
		t.Fatal(err)
	}
	var v3Shards int
	for _, tag := range []string{"{" + lanesService + "}", "{" + lanesService + "#1}", "{" + lanesService + "#2}"} {
		if rdb.XLen(ctx, "rpr:v1:"+tag+":req:v3").Val() > 0 {
			v3Shards++
		}
	}
	if v3Shards < 2 {
		t.Fatalf("lane v3's requests are in %d shard(s); want them spread", v3Shards)
	}

	lanes, err := handle(rdb).Service(lanesService).LaneStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(lanes) != 3 || lanes[0].Lane != tunnel.DefaultLane || lanes[1].Lane != "v2" || lanes[2].Lane != "v3" {
		t.Fatalf("LaneStats: %+v; want the lanes default, v2, v3", lanes)
	}
	now := lanes[0].RedisTime
	want := []admin.ServiceStats{
		// One server reads the 3 shards' streams: one consumer.
		{Service: lanesService, Lane: tunnel.DefaultLane, Shards: 3, DeadLetterCap: tunnel.DefaultMaxDeadLetters, EntriesAdded: calls, Consumers: 1, DeadLetters: 1, LiveWorkers: 1, RedisTime: now},
		{Service: lanesService, Lane: "v2", Shards: 3, DeadLetterCap: tunnel.DefaultMaxDeadLetters, EntriesAdded: v2Calls, Consumers: 1, DeadLetters: 1, LiveWorkers: 1, RedisTime: now},
		// No server ever read v3: no group; every request lags.
		{Service: lanesService, Lane: "v3", Shards: 3, DeadLetterCap: tunnel.DefaultMaxDeadLetters, Length: queued, EntriesAdded: queued, Lag: queued, DeadLetters: 1, RedisTime: now},
	}
	for i := range want {
		if lanes[i] != want[i] {
			t.Errorf("lane %s:\n got %+v\nwant %+v", want[i].Lane, lanes[i], want[i])
		}
	}
	total, err := handle(rdb).Service(lanesService).Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantTotal := admin.ServiceStats{Service: lanesService, Shards: 3, DeadLetterCap: tunnel.DefaultMaxDeadLetters, Length: queued, EntriesAdded: queued + calls + v2Calls, Lag: queued, Consumers: 2,
		DeadLetters: 1, LiveWorkers: 2, RedisTime: total.RedisTime}
	if total != wantTotal {
		t.Errorf("Stats:\n got %+v\nwant %+v", total, wantTotal)
	}
	all, err := handle(rdb).Stats(ctx, lanesService)
	if err != nil || len(all) != 3 || all[2].Lane != "v3" || all[2].Length != queued {
		t.Errorf("Stats(%s) = %+v, %v; want its 3 lanes", lanesService, all, err)
	}

	// A lane neither routed nor served is inspected when named.
	if _, err := client.Enqueue(ctx, job, wrapperspb.String("stranded"), tunnel.WithLane("v9")); err != nil {
		t.Fatal(err)
	}
	lanes, err = handle(rdb).Service(lanesService).LaneStats(ctx, "v9", "default", "Not A Lane")
	if err != nil || len(lanes) != 4 || lanes[3].Lane != "v9" || lanes[3].Length != 1 || lanes[3].Lag != 1 {
		t.Errorf("LaneStats(v9, default, Not A Lane) = %+v, %v; want lanes default, v2, v3 and v9, v9 with 1 request", lanes, err)
	}
}
