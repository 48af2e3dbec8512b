package tunnel_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

const greeterService = "examples.greeter.v1.Greeter"

// inspect is InspectService on the default prefix, failing the test on
// error.
func inspect(t *testing.T, rdb redis.UniversalClient, service string) tunnel.ServiceStats {
	t.Helper()
	st, err := tunnel.InspectService(context.Background(), rdb, "", service)
	if err != nil {
		t.Fatalf("InspectService(%s): %v", service, err)
	}
	return st
}

// TestInspectService follows a greeter service through its life: idle
// after some calls, busy with requests queued behind a running one,
// stopped with requests left in its stream, and with a request held by a
// worker that died and a dead letter.
func TestInspectService(t *testing.T) {
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
	want := tunnel.ServiceStats{Service: greeterService, EntriesAdded: 5, Consumers: 1, LiveWorkers: 1, RedisTime: idle.RedisTime}
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
	var busy tunnel.ServiceStats
	waitFor(t, "three calls queued", func() bool {
		busy = inspect(t, rdb, greeterService)
		return busy.Lag == 3
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
	all, err := tunnel.InspectAll(ctx, rdb, "")
	if err != nil || len(all) != 1 || all[0].Service != greeterService {
		t.Fatalf("InspectAll() = %+v, %v; want the greeter alone", all, err)
	}
	all, err = tunnel.InspectAll(ctx, rdb, "", "z.Missing", greeterService)
	if err != nil || len(all) != 2 || all[0].Service != "z.Missing" || all[1].Service != greeterService {
		t.Fatalf("InspectAll(z.Missing, greeter) = %+v, %v", all, err)
	}
}

// TestInspectServiceMissing: a service Redis knows nothing of is zeros, not
// an error, and so are the group's figures of a stream without the group.
func TestInspectServiceMissing(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	st := inspect(t, rdb, "no.such.v1.Service")
	if want := (tunnel.ServiceStats{Service: "no.such.v1.Service", RedisTime: st.RedisTime}); st != want || st.RedisTime.IsZero() {
		t.Fatalf("missing service: got %+v; want zeros with a Redis time", st)
	}

	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: "rpr:v1:{svc.One}:req", Values: []string{"e", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	got := inspect(t, rdb, "svc.One")
	if got.Length != 1 || got.EntriesAdded != 1 || got.Lag != 0 || got.Pending != 0 || got.Consumers != 0 || got.OldestPending != 0 {
		t.Fatalf("stream without a group: got %+v; want length 1, 1 added, no group figures", got)
	}
}

func TestCallsPerSecond(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(svc string, added int64, d time.Duration) tunnel.ServiceStats {
		return tunnel.ServiceStats{Service: svc, EntriesAdded: added, RedisTime: t0.Add(d)}
	}
	for _, c := range []struct {
		name      string
		prev, cur tunnel.ServiceStats
		rate      float64
		ok        bool
	}{
		{"steady", at("s", 100, 0), at("s", 350, 500*time.Millisecond), 500, true},
		{"idle", at("s", 100, 0), at("s", 100, time.Second), 0, true},
		{"no time", at("s", 100, 0), at("s", 200, 0), 0, false},
		{"counter reset", at("s", 100, 0), at("s", 3, time.Second), 0, false},
		{"other service", at("s", 100, 0), at("t", 200, time.Second), 0, false},
	} {
		rate, ok := c.cur.CallsPerSecond(c.prev)
		if rate != c.rate || ok != c.ok {
			t.Errorf("%s: CallsPerSecond = %v, %v; want %v, %v", c.name, rate, ok, c.rate, c.ok)
		}
	}
}
