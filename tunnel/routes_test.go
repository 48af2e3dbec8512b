package tunnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/internal/logcapture"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// lanesService answers with the lane of the server that ran the call
// (Which), and counts async jobs per value and lane (Job).
const lanesService = "test.v1.Lanes"

// laneServer is one server in one lane, with what it executed.
type laneServer struct {
	lane string
	mu   sync.Mutex
	runs map[string]int // async executions per value
}

func (s *laneServer) ran(value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs[value]++
}

func (s *laneServer) executed() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.runs))
	for k, v := range s.runs {
		out[k] = v
	}
	return out
}

func lanesDesc(shards int) *tunnel.ServiceDesc {
	info := &tunnel.ServiceInfo{Name: lanesService, Shards: shards}
	which := tunnel.MethodDesc{
		Service: info, Name: "Which",
		Handler: func(impl any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
			return wrapperspb.String(impl.(*laneServer).lane), nil
		},
	}
	job := tunnel.MethodDesc{
		Service: info, Name: "Job", Async: true, Idempotent: true,
		Handler: func(impl any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
			in := new(wrapperspb.StringValue)
			if err := decode(in); err != nil {
				return nil, err
			}
			impl.(*laneServer).ran(in.GetValue())
			return nil, nil
		},
	}
	return &tunnel.ServiceDesc{Service: info, Methods: []tunnel.MethodDesc{which, job}}
}

// startLane runs a server of lanesService in lane until the test ends or
// stop is called; it returns once the server is live.
func startLane(t *testing.T, rdb redis.UniversalClient, lane string, shards int) (srv *laneServer, stop func()) {
	t.Helper()
	srv = &laneServer{lane: laneOrDefault(lane), runs: map[string]int{}}
	server, err := tunnel.NewServer(rdb, withTestLease(tunnel.ServerOptions{
		Lane: lane, Logger: slog.New(slog.NewTextHandler(&logcapture.Buffer{}, nil)),
		RetryPollInterval: 20 * time.Millisecond,
	}))
	if err != nil {
		t.Fatal(err)
	}
	server.RegisterService(lanesDesc(shards), srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve in lane %s: %v", lane, err)
			}
		})
	}
	t.Cleanup(stop)
	waitFor(t, "server of lane "+lane+" live", func() bool {
		for _, st := range mustLanes(t, rdb) {
			if st.Lane == laneOrDefault(lane) && st.LiveWorkers > 0 {
				return true
			}
		}
		return false
	})
	return srv, stop
}

func laneOrDefault(lane string) string {
	if lane == "" {
		return tunnel.DefaultLane
	}
	return lane
}

func mustLanes(t *testing.T, rdb redis.UniversalClient) []admin.LaneStatus {
	t.Helper()
	st, err := lanesAdmin(rdb).Lanes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func newLanesClient(t *testing.T, rdb redis.UniversalClient) *tunnel.Client {
	t.Helper()
	c, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: slog.New(slog.NewTextHandler(&logcapture.Buffer{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func which(ctx context.Context, c *tunnel.Client, shards int, opts ...tunnel.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	err := c.Invoke(ctx, &lanesDesc(shards).Methods[0], wrapperspb.String(""), out, opts...)
	return out.GetValue(), err
}

// lanesAdmin is the operator handle of lanesService on rdb.
func lanesAdmin(rdb redis.UniversalClient) *admin.Service {
	return admin.New(rdb, admin.Options{}).Service(lanesService)
}

func setRoute(t *testing.T, table *admin.Routes, pattern string, specs ...string) {
	t.Helper()
	var rules []admin.RouteRule
	for _, spec := range specs {
		r, err := admin.ParseRouteRule(spec)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, r)
	}
	if err := table.Set(context.Background(), pattern, rules); err != nil {
		t.Fatal(err)
	}
}

// waitRouted calls until a call lands in lane, and returns how long after
// start that was.
func waitRouted(t *testing.T, c *tunnel.Client, lane string, start time.Time, opts ...tunnel.CallOption) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		got, err := which(ctx, c, 0, opts...)
		if err == nil && got == lane {
			return time.Since(start)
		}
	}
	t.Fatalf("no call reached lane %s within 20s of the route change", lane)
	return 0
}

// TestGrayReleaseWeights: v1:90,v2:10 sends 10% ± 1.5% of 10,000 calls to
// v2; a header route sends every canary call to v2; a weight change
// applies at once (the time is logged, not asserted).
func TestGrayReleaseWeights(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	startLane(t, rdb, "v1", 0)
	startLane(t, rdb, "v2", 0)
	client := newLanesClient(t, rs.Client(t))
	table := lanesAdmin(rdb).Routes()
	setRoute(t, table, lanesService+"/*", "x-canary=true => v2", "v1:90,v2:10")
	waitRouted(t, client, "v2", time.Now(), tunnel.WithHeader("x-canary", "true"))

	const calls = 10_000
	counts := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan struct{})
	for range 32 {
		wg.Go(func() {
			for range work {
				got, err := which(context.Background(), client, 0)
				mu.Lock()
				if err != nil {
					counts["error: "+tunnel.CodeOf(err).String()]++
				} else {
					counts[got]++
				}
				mu.Unlock()
			}
		})
	}
	for range calls {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	share := float64(counts["v2"]) / calls
	t.Logf("10,000 calls under v1:90,v2:10: %v (v2 share %.2f%%)", counts, 100*share)
	if counts["v1"]+counts["v2"] != calls {
		t.Fatalf("calls by lane = %v, want all %d answered by v1 or v2", counts, calls)
	}
	if share < 0.085 || share > 0.115 {
		t.Errorf("v2 got %.2f%% of the calls, want 10%% ± 1.5%%", 100*share)
	}

	for i := range 200 {
		got, err := which(context.Background(), client, 0, tunnel.WithHeader("X-Canary", "true"))
		if err != nil || got != "v2" {
			t.Fatalf("canary call %d went to %q (err %v), want v2", i, got, err)
		}
	}

	start := time.Now()
	setRoute(t, table, lanesService+"/*", "v2")
	took := waitRouted(t, client, "v2", start)
	// The old table sends a tenth of the calls to v2 too, so one call in
	// v2 does not show that the client reads the new one: 30 in a row do
	// (10^-30 by chance). Once it does, every later call must go to v2.
	for streak := 0; streak < 30; {
		if got, err := which(context.Background(), client, 0); err == nil && got == "v2" {
			streak++
		} else {
			streak = 0
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("calls did not all go to v2 within 20s of the switch")
		}
	}
	for i := range 100 {
		if got, err := which(context.Background(), client, 0); err != nil || got != "v2" {
			t.Fatalf("call %d after the switch went to %q (err %v), want v2", i, got, err)
		}
	}
	t.Logf("weights changed to v2:100: the first call in v2 came %v after Set", took)
}

// TestRouteChangeWithoutPubSub: a client whose announcement is lost still
// applies a change within about a second, by its periodic reload.
func TestRouteChangeWithoutPubSub(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	startLane(t, rdb, "v1", 0)
	startLane(t, rdb, "v2", 0)
	client := newLanesClient(t, rs.Client(t))
	if got, err := which(context.Background(), client, 0, tunnel.WithLane("v1")); err != nil || got != "v1" {
		t.Fatalf("WithLane(v1) went to %q, %v", got, err)
	}
	// Written behind the table's back: no announcement.
	start := time.Now()
	if err := rdb.HSet(context.Background(), "rpr:v1:{"+lanesService+"}:routes", lanesService+"/Which", `[{"lanes":[{"lane":"v2","weight":1}]}]`).Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("route written without announcement: applied after %v", waitRouted(t, client, "v2", start))
}

// TestRouteToLaneWithoutServer: a call routed to a lane no server serves
// fails at once, UNAVAILABLE and not executed, naming the lane.
func TestRouteToLaneWithoutServer(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	startLane(t, rdb, "", 0)
	client := newLanesClient(t, rs.Client(t))
	setRoute(t, lanesAdmin(rdb).Routes(), lanesService+"/Which", "v9")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	for ctx.Err() == nil {
		if _, err = which(ctx, client, 0); err != nil {
			break
		}
	}
	if tunnel.CodeOf(err) != tunnel.Unavailable || !tunnel.NotExecuted(err) || !strings.Contains(err.Error(), "lane v9") {
		t.Fatalf("call routed to an empty lane: %v, want UNAVAILABLE, not executed, naming lane v9", err)
	}
}

// TestShardedServiceSpreadsAndServes: a 3-shard service spreads its queued
// requests over the three shards' streams, a server reads them all, and
// each runs once.
func TestShardedServiceSpreadsAndServes(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	client := newLanesClient(t, rs.Client(t))
	job := &lanesDesc(3).Methods[1]
	if err := lanesAdmin(rdb).SetShards(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := range n {
		if _, err := client.Enqueue(context.Background(), job, wrapperspb.String(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	count, err := lanesAdmin(rdb).Shards(context.Background())
	if err != nil || count != 3 {
		t.Fatalf("Shards = %d, %v; want the 3 the operator recorded", count, err)
	}
	var total int64
	for shard, key := range []string{"{" + lanesService + "}", "{" + lanesService + "#1}", "{" + lanesService + "#2}"} {
		got := rdb.XLen(context.Background(), "rpr:v1:"+key+":req").Val()
		if got < n/6 {
			t.Errorf("shard %d holds %d of %d requests; want them spread", shard, got, n)
		}
		total += got
	}
	if total != n {
		t.Fatalf("the shards hold %d requests, want %d", total, n)
	}
	if err := lanesAdmin(rdb).SetShards(context.Background(), 1); err == nil || !strings.Contains(err.Error(), "stranded") {
		t.Fatalf("lowering the shard count over queued requests: %v, want a refusal", err)
	}

	srv, _ := startLane(t, rdb, "", 0) // configured for 1 shard: follows the recorded 3
	waitFor(t, "every job ran", func() bool { return len(srv.executed()) == n })
	for i := range 60 {
		if got, err := which(context.Background(), client, 3); err != nil || got != tunnel.DefaultLane {
			t.Fatalf("unary call %d on a sharded service: %q, %v", i, got, err)
		}
	}
	for v, runs := range srv.executed() {
		if runs != 1 {
			t.Errorf("job %s ran %d times", v, runs)
		}
	}
	waitFor(t, "shards drained", func() bool {
		return lanesAdmin(rdb).SetShards(context.Background(), 1) == nil
	})
}

// TestShardRaiseWhileServing: a server started at one shard starts reading
// the shards an operator's raise adds, without a restart, and clients
// follow.
func TestShardRaiseWhileServing(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	srv, _ := startLane(t, rdb, "", 1)
	client := newLanesClient(t, rs.Client(t))
	job := &lanesDesc(4).Methods[1]
	if err := lanesAdmin(rdb).SetShards(context.Background(), 4); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to read the new shards", func() bool {
		return rdb.Exists(context.Background(), "rpr:v1:{"+lanesService+"#3}:req").Val() == 1
	})
	const n = 200
	for i := range n {
		if _, err := client.Enqueue(context.Background(), job, wrapperspb.String(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every job ran, in every shard", func() bool { return len(srv.executed()) == n })
}

// TestClientNeverRaisesShards: a client built for 64 shards of a service
// whose servers run one does not raise the recorded count (every server
// would open 64 readers per lane and exhaust its pool): it follows the
// record, says so, and its calls are served.
func TestClientNeverRaisesShards(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	srv, _ := startLane(t, rdb, "", 1)
	logs := &logcapture.Buffer{}
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{
		Shards: map[string]int{lanesService: tunnel.MaxShards},
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	job := &lanesDesc(0).Methods[1]
	const n = 20
	for i := range n {
		if _, err := client.Enqueue(context.Background(), job, wrapperspb.String(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every job ran", func() bool { return len(srv.executed()) == n })
	if count, err := lanesAdmin(rdb).Shards(context.Background()); err != nil || count != 1 {
		t.Errorf("recorded shard count = %d, %v after a client built for %d: want 1", count, err, tunnel.MaxShards)
	}
	if !strings.Contains(logs.String(), "configured for more shards than the service has") {
		t.Errorf("no warning that the client expects more shards:\n%s", logs.String())
	}
}
