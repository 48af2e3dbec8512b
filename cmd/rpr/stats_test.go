package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

const liveViewService = "examples.greeter.v1.Greeter"

// greeterForLiveView runs the example Greeter server against rs until the
// test ends, adds a dead letter to its DLQ, and returns a client of it
// once the server is live.
func greeterForLiveView(t *testing.T, rs *redistest.Server) greeterv1.GreeterClient {
	t.Helper()
	startGreeter(t, rs, "live-view-w1")
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	rdb := rs.Client(t)
	dlq := tunnel.DefaultPrefix + "{" + liveViewService + "}:dlq"
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: dlq, Values: []string{"reason", "test"}}).Err(); err != nil {
		t.Fatal(err)
	}
	return greeterv1.NewGreeterClient(client)
}

// tableRows splits printed lines into fields, keyed by the first; the
// first line with a given first field wins (top's history section repeats
// the service names below the table).
func tableRows(out string) map[string][]string {
	rows := map[string][]string{}
	for line := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && rows[f[0]] == nil {
			rows[f[0]] = f
		}
	}
	return rows
}

func TestStats(t *testing.T) {
	rs := redistest.Start(t)
	greeterClient := greeterForLiveView(t, rs)

	// Calls keep coming while stats samples, so CALLS/S is above zero.
	ctx, stopCalls := context.WithCancel(context.Background())
	calling := make(chan struct{})
	go func() {
		defer close(calling)
		for ctx.Err() == nil {
			_, _ = greeterClient.SayHello(ctx, &greeterv1.SayHelloRequest{Name: "ada"})
		}
	}()
	out, code := runRPR(t, "stats", "--redis", rs.URL(), "--interval", "300ms")
	stopCalls()
	<-calling
	if code != 0 {
		t.Fatalf("rpr stats: exit %d, output:\n%s", code, out)
	}
	rows := tableRows(out)
	if got := strings.Join(rows["SERVICE"], " "); got != strings.Join(statsColumns, " ") {
		t.Fatalf("header %q; want %q; output:\n%s", got, strings.Join(statsColumns, " "), out)
	}
	row := rows[liveViewService]
	if len(row) != len(statsColumns) {
		t.Fatalf("no full row for %s in:\n%s", liveViewService, out)
	}
	// SERVICE LANE LENGTH LAG PENDING OLDEST CONSUMERS WORKERS RETRY DLQ CALLS/S
	if row[1] != "default" || row[6] != "1" || row[7] != "1" || row[8] != "0" || row[9] != "1" {
		t.Fatalf("row %q: want lane default, 1 consumer, 1 live worker, nothing retrying, 1 dead letter", row)
	}
	if rate, err := strconv.ParseFloat(row[10], 64); err != nil || rate <= 0 {
		t.Fatalf("CALLS/S %q: want a positive rate while calls were made", row[10])
	}

	// An unknown service is an error naming the known ones.
	out, code = runRPR(t, "stats", "--redis", rs.URL(), "--interval", "50ms", "no.such.v1.Service", liveViewService)
	if code != 1 || !strings.Contains(out, "unknown service no.such.v1.Service; known: ") {
		t.Fatalf("rpr stats (unknown): exit %d, output:\n%s", code, out)
	}

	// Nothing under another prefix.
	out, code = runRPR(t, "stats", "--redis", rs.URL(), "--prefix", "other:", "--interval", "10ms")
	if code != 0 || !strings.Contains(out, "no services under prefix") {
		t.Fatalf("empty prefix: exit %d, output %q", code, out)
	}
}

func TestFormatAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		850 * time.Millisecond:                    "850ms",
		12300 * time.Millisecond:                  "12.3s",
		4*time.Minute + 5*time.Second:             "4m05s",
		2*time.Hour + 3*time.Minute:               "2h03m",
		76 * time.Hour:                            "3d04h",
		59*time.Second + 990*time.Millisecond:     "59.9s",
		time.Hour - time.Nanosecond:               "59m59s",
		10*time.Minute + 500*time.Millisecond:     "10m00s",
		0:                                         "0ms",
		24*time.Hour + 59*time.Minute + time.Hour: "1d01h",
	} {
		if got := formatAge(d); got != want {
			t.Errorf("formatAge(%v) = %q; want %q", d, got, want)
		}
	}
}

// mailSvc is a hand-built service sharded over 3 hash tags, for the tests
// of what the operator commands show of shards and lanes. Send is async
// and fails permanently until fixed (so it dead-letters into every
// shard); Ping is unary.
const mailSvc = "rprtest.mail.v1.Mail"

// mailWorld is a real redis-server with servers of mailSvc in lanes, and
// a client.
type mailWorld struct {
	t      *testing.T
	rs     *redistest.Server
	rdb    *redis.Client
	client *tunnel.Client
	fixed  atomic.Bool

	mu   sync.Mutex
	sent map[string]string // value -> lane of the server that ran it
}

func newMailWorld(t *testing.T) *mailWorld {
	t.Helper()
	return newMailWorldOn(t, redistest.Start(t))
}

// newMailWorldOn is newMailWorld on a Redis the test started already.
func newMailWorldOn(t *testing.T, rs *redistest.Server) *mailWorld {
	t.Helper()
	w := &mailWorld{t: t, rs: rs, rdb: rs.Client(t), sent: map[string]string{}}
	var err error
	w.client, err = tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{BizCode: "MAIL", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.client.Close() })
	return w
}

// mailInfo is the Mail service of mailWorld, with 3 shards.
var mailInfo = tunnel.ServiceInfo{Name: mailSvc, Shards: 3}

func (w *mailWorld) method(name string) *tunnel.MethodDesc {
	return &tunnel.MethodDesc{
		Service: &mailInfo, Name: name, Async: name == "Send",
		Handler: func(impl any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
			lane := impl.(string)
			if name == "Ping" {
				return wrapperspb.String(lane), nil
			}
			in := new(wrapperspb.StringValue)
			if err := decode(in); err != nil {
				return nil, err
			}
			if !w.fixed.Load() {
				return nil, tunnel.Permanent(errors.New("mailbox full"))
			}
			w.mu.Lock()
			w.sent[in.GetValue()] = lane
			w.mu.Unlock()
			return nil, nil
		},
	}
}

// serve runs a server of mailSvc in lane ("" for the default) until the
// test ends or the returned stop is called; it returns once the server's
// heartbeat is seen.
func (w *mailWorld) serve(lane string) (stop func()) {
	w.t.Helper()
	name := lane
	if name == "" {
		name = tunnel.DefaultLane
	}
	srv, err := tunnel.NewServer(w.rs.Client(w.t), tunnel.ServerOptions{Lane: lane, WorkerID: "mail-" + name, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		w.t.Fatal(err)
	}
	srv.RegisterService(&tunnel.ServiceDesc{Service: &mailInfo, Methods: []tunnel.MethodDesc{*w.method("Send"), *w.method("Ping")}}, name)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				w.t.Errorf("Serve in lane %s: %v", name, err)
			}
		})
	}
	w.t.Cleanup(stop)
	w.waitFor("a live server in lane "+name, func() bool {
		h, err := serviceOf(w.rdb, mailSvc).Health(context.Background())
		return err == nil && h.ServingLane(lane)
	})
	return stop
}

// route sends Send to lane through the routing table.
func (w *mailWorld) route(lane string) {
	w.t.Helper()
	rule, err := admin.ParseRouteRule(lane)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := serviceOf(w.rdb, mailSvc).Routes().Set(context.Background(), mailSvc+"/Send", []admin.RouteRule{rule}); err != nil {
		w.t.Fatal(err)
	}
}

// send enqueues value to Send and returns its request id.
func (w *mailWorld) send(value string, opts ...tunnel.CallOption) string {
	w.t.Helper()
	r, err := w.client.Enqueue(context.Background(), w.method("Send"), wrapperspb.String(value), opts...)
	if err != nil {
		w.t.Fatal(err)
	}
	return r.RequestID
}

// ping calls Ping and returns the lane that answered.
func (w *mailWorld) ping(opts ...tunnel.CallOption) string {
	w.t.Helper()
	out := new(wrapperspb.StringValue)
	if err := w.client.Invoke(context.Background(), w.method("Ping"), wrapperspb.String(""), out, opts...); err != nil {
		w.t.Fatal(err)
	}
	return out.GetValue()
}

func (w *mailWorld) delivered() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.sent)
}

func (w *mailWorld) waitFor(what string, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// statsLines returns the rows of a stats table by lane, for one service;
// the first line of a lane wins (top's history section repeats them).
func statsLines(out, service string) map[string][]string {
	rows := map[string][]string{}
	for line := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == service && rows[f[1]] == nil {
			rows[f[1]] = f
		}
	}
	return rows
}

// TestStatsLanesAndShards: a 3-shard service with servers in the default
// lane and lane v2, requests queued in lane v3 (routed, no server) and in
// lane v9 (neither routed nor served): one row per lane with a SHARDS
// column, the service's DLQ on its first row; rpr ls shows each worker's
// lane and shards.
func TestStatsLanesAndShards(t *testing.T) {
	w := newMailWorld(t)
	w.serve("")
	w.serve("v2")
	w.route("v3")
	for i := range 6 {
		w.send(fmt.Sprint("queued-", i))
	}
	for range 3 {
		if lane := w.ping(); lane != tunnel.DefaultLane {
			t.Fatalf("Ping answered by lane %s", lane)
		}
	}
	if lane := w.ping(tunnel.WithLane("v2")); lane != "v2" {
		t.Fatalf("Ping in v2 answered by lane %s", lane)
	}
	// Lane v9 is neither routed nor served, but holds requests.
	for i := range 2 {
		w.send(fmt.Sprint("stranded-", i), tunnel.WithLane("v9"))
	}
	if err := w.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: "rpr:v1:{" + mailSvc + "#1}:dlq", Values: []string{"reason", "test"}}).Err(); err != nil {
		t.Fatal(err)
	}

	heartbeat(t, w.rs, liveViewService) // known to Redis, though nothing runs
	out, code := runRPR(t, "stats", "--redis", w.rs.URL(), "--interval", "50ms", mailSvc, liveViewService)
	if code != 0 {
		t.Fatalf("rpr stats: exit %d, output:\n%s", code, out)
	}
	t.Logf("rpr stats:\n%s", out)
	wantHeader := "SERVICE LANE SHARDS LENGTH LAG PENDING OLDEST CONSUMERS WORKERS RETRY DLQ CALLS/S"
	if header := strings.Join(strings.Fields(strings.SplitN(out, "\n", 2)[0]), " "); header != wantHeader {
		t.Fatalf("header %q; want %q", header, wantHeader)
	}
	rows := statsLines(out, mailSvc)
	// SERVICE LANE SHARDS LENGTH LAG PENDING OLDEST CONSUMERS WORKERS RETRY DLQ CALLS/S
	for lane, want := range map[string][]string{
		"default": {mailSvc, "default", "3", "0", "0", "0", "-", "1", "1", "0", "1", "0.0"},
		"v2":      {mailSvc, "v2", "3", "0", "0", "0", "-", "1", "1", "0", `"`, "0.0"},
		"v3":      {mailSvc, "v3", "3", "6", "6", "0", "-", "0", "0", "0", `"`, "0.0"},
		"v9":      {mailSvc, "v9", "3", "2", "2", "0", "-", "0", "0", "0", `"`, "0.0"},
	} {
		if got := strings.Join(rows[lane], " "); got != strings.Join(want, " ") {
			t.Errorf("lane %s: row %q; want %q", lane, got, strings.Join(want, " "))
		}
	}
	if len(rows) != 4 {
		t.Errorf("%d rows for %s; want 4 (its lanes):\n%s", len(rows), mailSvc, out)
	}
	// An unsharded service beside it shows 1 shard.
	if row := statsLines(out, liveViewService)["default"]; len(row) != 12 || row[2] != "1" {
		t.Errorf("unsharded service row %q; want 1 shard", row)
	}

	res := runCLI(t, "", "ls", "--redis", w.rs.URL())
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(mailSvc) + `  serving, 2 live workers$`),
		regexp.MustCompile(`(?m)^  mail-default +live +\S+ +\d+ +default +0-2 +- +Ping,Send +[0-9.]+m?s ago$`),
		regexp.MustCompile(`(?m)^  mail-v2 +live +\S+ +\d+ +v2 +0-2 +- +Ping,Send +[0-9.]+m?s ago$`),
	} {
		if res.code != 0 || !want.MatchString(res.stdout) {
			t.Errorf("rpr ls: exit %d, output lacks %s:\n%s", res.code, want, res.stdout)
		}
	}
}

func TestShardList(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{
		{nil, "-"}, {[]int{0}, "0"}, {[]int{2, 0, 1}, "0-2"}, {[]int{0, 1, 2, 3, 6, 8, 9}, "0-3,6,8-9"},
	} {
		if got := shardList(c.in); got != c.want {
			t.Errorf("shardList(%v) = %q; want %q", c.in, got, c.want)
		}
	}
}
