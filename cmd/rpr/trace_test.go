package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

func TestTraceShowsARequestsLife(t *testing.T) {
	rs := redistest.Start(t)
	// One handler slot, so a slow call keeps the next one waiting in the queue.
	srv, err := tunnel.NewServer(rs.Client(t), tunnel.ServerOptions{WorkerID: "tracer-w1", Concurrency: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	greeterv1.RegisterGreeterServer(srv, greeter.Server{})
	serve(t, rs, srv, greeterService)
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	greet := greeterv1.NewGreeterClient(client)
	var ok string
	if _, err := greet.SayHello(context.Background(), &greeterv1.SayHelloRequest{Name: "Ada"}, tunnel.CaptureRequestID(&ok)); err != nil {
		t.Fatal(err)
	}
	// A unary call that finished leaves nothing in Redis (the fast path,
	// retention off): trace says so, how to keep a record, and where to
	// look instead.
	out, code := runRPR(t, "trace", "--redis", rs.URL(), ok)
	if code != 1 || !strings.Contains(out, greeterService+"  retention is off: a call of it finished and left nothing; set ServerOptions.Retention") ||
		!strings.Contains(out, "spans and log lines carry the id") {
		t.Errorf("trace of a finished unary call: exit %d:\n%s", code, out)
	}
	// A call that timed out in the queue is marked, and trace shows it.
	var late string
	slow := make(chan error, 1)
	go func() {
		_, err := greet.SlowHello(context.Background(), &greeterv1.SlowHelloRequest{Name: "slow", DelayMs: 1500})
		slow <- err
	}()
	rdb := rs.Client(t)
	for rdb.XPending(context.Background(), "rpr:v1:{"+greeterService+"}:req", "workers").Val().Count == 0 {
		time.Sleep(10 * time.Millisecond) // until the slow call holds the only slot
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = greet.SayHello(ctx, &greeterv1.SayHelloRequest{Name: "late"}, tunnel.CaptureRequestID(&late))
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if tunnel.CodeOf(err) != tunnel.DeadlineExceeded || !tunnel.NotExecuted(err) {
		t.Fatalf("a call that waited out its deadline in the queue: %v", err)
	}
	out, code = runRPR(t, "trace", "--redis", rs.URL(), late)
	if code != 0 || !strings.Contains(out, "service   examples.greeter.v1.Greeter") || !strings.Contains(out, "state     TIMEOUT") {
		t.Errorf("trace of a call that timed out in the queue: exit %d:\n%s", code, out)
	}
	out, code = runRPR(t, "trace", "--redis", rs.URL(), "20261129-ORD1-1795995318695-X857YZJDH0")
	if code != 1 || !strings.Contains(out, "Redis knows nothing of it") {
		t.Errorf("unknown id: exit %d:\n%s", code, out)
	}
	// What is not a request id is an idempotency key; what is neither is
	// refused.
	out, code = runRPR(t, "trace", "--redis", rs.URL(), "not-an-id")
	if code != 1 || !strings.Contains(out, "key       not-an-id (not a request id: looked up as an async request's idempotency key)") ||
		!strings.Contains(out, "Redis knows nothing of it") {
		t.Errorf("unknown key: exit %d:\n%s", code, out)
	}
	out, code = runRPR(t, "trace", "--redis", rs.URL(), strings.Repeat("k", 257))
	if code != 2 || !strings.Contains(out, "is neither a request id (YYYYMMDD-BIZ4-<unix ms>-<random>) nor an idempotency key (1 to 256 bytes)") {
		t.Errorf("a 257-byte argument: exit %d:\n%s", code, out)
	}
}

// TestTraceShardedService: trace finds requests of a 3-shard service in
// whatever shard and lane holds them, and says which.
func TestTraceShardedService(t *testing.T) {
	w := newMailWorld(t)
	w.serve("")
	w.route("v3") // no server: Send's requests stay queued there
	seen := map[string]bool{}
	// A request without a key goes to a shard at random: send until every
	// shard holds one (six sends miss one about a quarter of the time;
	// sixty, practically never).
	for i := 0; i < 60 && len(seen) < 3; i++ {
		id := w.send(fmt.Sprint("m", i))
		out, code := runRPR(t, "trace", "--redis", w.rs.URL(), id)
		if code != 0 || !strings.Contains(out, "service   "+mailSvc+"\n") || !strings.Contains(out, "lane      v3\n") ||
			!strings.Contains(out, "in the request stream: "+mailSvc+"/Send") {
			t.Fatalf("trace of queued %s: exit %d:\n%s", id, code, out)
		}
		for shard := range 3 {
			if strings.Contains(out, fmt.Sprintf("shard     %d of 3\n", shard)) {
				seen[fmt.Sprint(shard)] = true
			}
		}
		if i == 0 {
			t.Logf("rpr trace %s:\n%s", id, out)
		}
	}
	if !seen["2"] || len(seen) != 3 {
		t.Fatalf("traced requests in shards %v; want each of 0, 1 and 2", seen)
	}
}

// TestTraceStream: a streaming call that ended leaves its state, and
// trace shows how it ended and how many messages went each way.
func TestTraceStream(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "stream-tracer")
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var id string
	stream, err := greeterv1.NewGreeterClient(client).Countdown(context.Background(), &greeterv1.CountdownRequest{From: 3, IntervalMs: 1}, tunnel.CaptureRequestID(&id))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("Countdown: %v", err)
			}
			break
		}
	}
	out, code := runRPR(t, "trace", "--redis", rs.URL(), id)
	for _, want := range []string{"state     SUCCESS", "stream    the server sent 3 messages and received 1"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("trace of an ended stream lacks %q: exit %d:\n%s", want, code, out)
		}
	}
	t.Logf("rpr trace of a stream:\n%s", out)
}
