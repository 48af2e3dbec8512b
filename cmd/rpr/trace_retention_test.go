package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestTraceRetainedUnaryCall: a unary call answered by a server with
// Retention is found after it finished: trace shows who finished it,
// when, and how (text and -o json, snake_case keys).
func TestTraceRetainedUnaryCall(t *testing.T) {
	rs := redistest.Start(t)
	srv, err := tunnel.NewServer(rs.Client(t), tunnel.ServerOptions{WorkerID: "keeper-1", Retention: time.Hour, Logger: slog.New(slog.DiscardHandler)})
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
	var id string
	reply, err := greeterv1.NewGreeterClient(client).SayHello(context.Background(), &greeterv1.SayHelloRequest{Name: "Ada"}, tunnel.CaptureRequestID(&id))
	if err != nil {
		t.Fatal(err)
	}
	out, code := runRPR(t, "trace", "--redis", rs.URL(), id)
	for _, want := range []string{
		"service   " + greeterService + "\n",
		"method    " + greeterService + "/SayHello\n",
		"state     SUCCESS\n",
		" by worker keeper-1: OK, ",
		"kept for 1h0m0s (ServerOptions.Retention), expires in ",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("trace of a retained call lacks %q: exit %d:\n%s", want, code, out)
		}
	}
	t.Logf("rpr trace of a retained unary call:\n%s", out)

	out, code = runRPR(t, "trace", "--redis", rs.URL(), id, "-o", "json")
	var j map[string]any
	if err := json.Unmarshal([]byte(out), &j); err != nil || code != 0 {
		t.Fatalf("-o json: exit %d, %v:\n%s", code, err, out)
	}
	finished, _ := j["finished"].(map[string]any)
	if j["found"] != true || j["request_id"] != id || j["state"] != "SUCCESS" || j["retention_ms"] != float64(time.Hour.Milliseconds()) ||
		finished["worker"] != "keeper-1" || finished["method"] != "SayHello" || finished["code"] != "OK" ||
		finished["bytes"] != float64(len(mustMarshal(t, reply))) {
		t.Errorf("-o json of a retained call:\n%s", out)
	}
	checkSnakeCase(t, j)

	if out, code = runRPR(t, "trace", "--redis", rs.URL(), id, "-o", "yaml"); code != 2 || !strings.Contains(out, `-o "yaml": want text or json`) {
		t.Errorf("-o yaml: exit %d:\n%s", code, out)
	}
}

// TestTraceAsyncByKeyAndByID: an async request sent with an idempotency
// key of its own is found by the key and by its request id, done or dead,
// and when the key is used again after a dead letter, the trace of the
// dead request says the key now holds the new one.
func TestTraceAsyncByKeyAndByID(t *testing.T) {
	w := newMailWorld(t)
	w.fixed.Store(true)
	w.serve("")
	ok := w.send("letter-1", tunnel.WithIdempotencyKey("order-1042"))
	w.waitFor("order-1042 delivered", func() bool { return w.delivered()["letter-1"] != "" })
	w.fixed.Store(false) // from now on Send fails permanently
	dead := w.send("letter-2", tunnel.WithIdempotencyKey("order-1043"))

	waitTrace := func(arg, state string) string {
		t.Helper()
		var out string
		w.waitFor(arg+" "+state, func() bool {
			out, _ = runRPR(t, "trace", "--redis", w.rs.URL(), arg)
			return strings.Contains(out, "state     "+state+"\n")
		})
		return out
	}
	out := waitTrace("order-1042", "SUCCESS")
	for _, want := range []string{
		"key       order-1042 (not a request id: looked up as an async request's idempotency key)\n",
		"request   " + ok + " (the one Redis names under the key)\n",
		"service   " + mailSvc + "\n",
		" by mail-default (attempt 1)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("trace by key lacks %q:\n%s", want, out)
		}
	}
	t.Logf("rpr trace order-1042:\n%s", out)
	out = waitTrace(ok, "SUCCESS")
	if !strings.Contains(out, "request   "+ok+"\n") || !strings.Contains(out, "key       order-1042 (async; its state is the key's)\n") {
		t.Errorf("trace by id of a request with its own key:\n%s", out)
	}
	out = waitTrace("order-1043", "DEAD")
	if !strings.Contains(out, "request   "+dead+" (the one Redis names under the key)\n") || !strings.Contains(out, "dead letter ") {
		t.Errorf("trace by key of a dead request:\n%s", out)
	}
	out = waitTrace(dead, "DEAD")
	if !strings.Contains(out, "key       order-1043 (async; its state is the key's)\n") {
		t.Errorf("trace by id of a dead request with its own key:\n%s", out)
	}

	// Sent again with the same key once fixed, the request runs anew: the
	// key's state is the new request's, and a trace of the dead one says
	// so.
	w.fixed.Store(true)
	again := w.send("letter-2", tunnel.WithIdempotencyKey("order-1043"))
	out = waitTrace("order-1043", "SUCCESS")
	if !strings.Contains(out, "request   "+again+" (the one Redis names under the key)\n") {
		t.Errorf("trace by key after a resend:\n%s", out)
	}
	out, _ = runRPR(t, "trace", "--redis", w.rs.URL(), dead)
	if !strings.Contains(out, "the key's state is now that of request "+again+", sent later with the same key") || !strings.Contains(out, "dead letter ") {
		t.Errorf("trace of the dead request after a resend with its key:\n%s", out)
	}

	out, code := runRPR(t, "trace", "--redis", w.rs.URL(), "order-1042", "-o", "json")
	var j map[string]any
	if err := json.Unmarshal([]byte(out), &j); err != nil || code != 0 {
		t.Fatalf("-o json: exit %d, %v:\n%s", code, err, out)
	}
	if j["by_key"] != true || j["key"] != "order-1042" || j["request_id"] != ok || j["state"] != "SUCCESS" || j["service"] != mailSvc {
		t.Errorf("-o json of a trace by key:\n%s", out)
	}
	checkSnakeCase(t, j)
	out, code = runRPR(t, "trace", "--redis", w.rs.URL(), "order-9999", "-o", "json")
	if err := json.Unmarshal([]byte(out), &j); err != nil || code != 1 || j["found"] != false || j["by_key"] != true {
		t.Errorf("-o json of an unknown key: exit %d, %v:\n%s", code, err, out)
	}
}

// checkSnakeCase fails t for a JSON key that is not snake_case, at any
// depth (header names, which are the caller's, aside).
func checkSnakeCase(t *testing.T, v any) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, sub := range v {
			if k != strings.ToLower(k) || strings.ContainsAny(k, "- ") {
				t.Errorf("JSON key %q is not snake_case", k)
			}
			if k != "header" {
				checkSnakeCase(t, sub)
			}
		}
	case []any:
		for _, sub := range v {
			checkSnakeCase(t, sub)
		}
	}
}
