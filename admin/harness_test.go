package admin_test

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/internal/logcapture"
	"github.com/rprtunnel/rpr/tunnel"
)

// The tests run real servers and clients of hand-written services (shaped
// like generated code) against a real redis-server, and read what they
// leave in Redis through the handle.

// handle is the operator handle of the default prefix on rdb.
func handle(rdb redis.UniversalClient) *admin.Client {
	return admin.New(rdb, admin.Options{})
}

// waitFor polls cond (a condition on the test's world) every 20ms until it
// holds, failing t after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10s waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quietLogger discards what servers and clients log, keeping it for a
// look in a debugger.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(&logcapture.Buffer{}, nil))
}

// serve runs server until the test ends or stop (idempotent) is called;
// stop waits for Serve to return and reports an error it returns.
func serve(t *testing.T, server *tunnel.Server, what string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve (%s): %v", what, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// lanesService answers with the lane of the server that ran the call
// (Which), and counts async jobs per value (Job).
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
	return maps.Clone(s.runs)
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
	server, err := tunnel.NewServer(rdb, tunnel.ServerOptions{
		Lane: lane, Logger: quietLogger(), RetryPollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	server.RegisterService(lanesDesc(shards), srv)
	stop = serve(t, server, "lane "+laneOrDefault(lane))
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
	st, err := handle(rdb).Service(lanesService).Lanes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
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

func newLanesClient(t *testing.T, rdb redis.UniversalClient) *tunnel.Client {
	t.Helper()
	c, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: quietLogger()})
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
