package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

func TestTraceShowsARequestsLife(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "tracer-w1")
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	greet := greeterv1.NewGreeterClient(client)
	var ok, bad string
	if _, err := greet.SayHello(context.Background(), &greeterv1.SayHelloRequest{Name: "Ada"}, tunnel.CaptureRequestID(&ok)); err != nil {
		t.Fatal(err)
	}
	if _, err := greet.SayHello(context.Background(), &greeterv1.SayHelloRequest{}, tunnel.CaptureRequestID(&bad)); tunnel.CodeOf(err) != tunnel.InvalidArgument {
		t.Fatal(err)
	}

	out, code := runRPR(t, "trace", "--redis", rs.URL(), ok)
	for _, want := range []string{"service   examples.greeter.v1.Greeter", "state     SUCCESS", "claimed", "by tracer-w1 (attempt 1)", "done", "answer    OK"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("trace of a success: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	out, code = runRPR(t, "trace", "--redis", rs.URL(), "--service", "examples.greeter.v1.Greeter", bad)
	if code != 0 || !strings.Contains(out, "state     FAILED") || !strings.Contains(out, "answer    INVALID_ARGUMENT: name is empty") {
		t.Errorf("trace of a failure: exit %d:\n%s", code, out)
	}
	out, code = runRPR(t, "trace", "--redis", rs.URL(), "20261129-ORD1-1795995318695-X857YZJDH0")
	if code != 1 || !strings.Contains(out, "Redis knows nothing of it") {
		t.Errorf("unknown id: exit %d:\n%s", code, out)
	}
	if out, code = runRPR(t, "trace", "--redis", rs.URL(), "not-an-id"); code != 2 {
		t.Errorf("malformed id: exit %d:\n%s", code, out)
	}
}

// TestTraceShardedService: trace finds requests of a 3-shard service in
// whatever shard and lane holds them, and says which.
func TestTraceShardedService(t *testing.T) {
	w := newMailWorld(t)
	w.serve("")
	w.route("v3") // no server: Send's requests stay queued there
	seen := map[string]bool{}
	for i := range 6 {
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
