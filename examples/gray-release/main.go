// Command gray-release walks through a gray release of the example Greeter
// in one process, talking only through Redis: a v1 and a v2 server, each in
// its own lane, and a client calling SayHello in a loop (every tenth call
// carries the header x-canary: true, like the calls of staff trying the new
// version). It changes the service's routing table step by step and prints,
// every second, the share of the calls each lane answered:
//
//  1. every call to v1                      v1
//  2. 10% of the calls to v2                v1:90,v2:10
//  3. and every canary call to v2           'x-canary=true => v2' v1:90,v2:10
//  4. every call to v2                      v2
//  5. roll back: v2 out of the routes, its lane drained, its server stopped
//
// Each change is made with the operator handle (admin.Routes), and the equivalent
// `rpr routes` command is printed. It ends by itself after five steps
// (--step each) and exits 0 when no call failed.
//
//	go run ./examples/gray-release                                   # embedded Redis
//	go run ./examples/gray-release --redis redis://127.0.0.1:6379/0  # a real one
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

// service is the Greeter's full name; pattern routes all its methods.
const (
	service = "examples.greeter.v1.Greeter"
	pattern = service + "/*"
)

// applyWithin is how long a route change takes to reach every client (a
// Pub/Sub announcement at once; a reload every second if it is lost). Step
// summaries count only the calls made after it.
const applyWithin = 1200 * time.Millisecond

func main() {
	var cfg config
	flag.StringVar(&cfg.redisURL, "redis", "", "Redis URL: redis://host:port/db, a Cluster seed list redis://h1:p1,h2:p2, or redis+sentinel://h1:p1,h2:p2/master; default: an embedded, in-memory Redis")
	flag.DurationVar(&cfg.step, "step", 4*time.Second, "how long each step lasts (at least 2s)")
	flag.IntVar(&cfg.rate, "rate", 200, "calls per second")
	flag.Parse()
	if cfg.step < 2*time.Second || cfg.rate < 10 {
		fmt.Fprintln(os.Stderr, "gray-release: --step must be at least 2s and --rate at least 10")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	steps, err := run(ctx, os.Stdout, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gray-release:", err)
		os.Exit(1)
	}
	for _, s := range steps {
		if s.total.errors > 0 {
			fmt.Fprintf(os.Stderr, "gray-release: %d calls failed in step %q\n", s.total.errors, s.name)
			os.Exit(1)
		}
	}
}

// config is what the flags set.
type config struct {
	redisURL string
	step     time.Duration
	rate     int
}

// tally counts calls by the lane that answered them.
type tally struct {
	all    map[string]int // lane -> calls
	canary map[string]int // lane -> calls with x-canary: true
	errors int
}

func newTally() tally { return tally{all: map[string]int{}, canary: map[string]int{}} }

func (t *tally) add(lane string, canary bool, err error) {
	switch {
	case err != nil:
		t.errors++
	case canary:
		t.canary[lane]++
		t.all[lane]++
	default:
		t.all[lane]++
	}
}

// stepResult is what one step's calls did, counted from applyWithin after
// its route change to its end.
type stepResult struct {
	name  string
	total tally
}

// walkthrough is the running example: the servers, the client's counts
// and the output.
type walkthrough struct {
	out   io.Writer
	outMu sync.Mutex

	mu     sync.Mutex
	second tally // calls since the last per-second line
	step   tally // calls counted for the current step
	count  bool  // whether calls count for the step yet
}

func (w *walkthrough) printf(format string, args ...any) {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	fmt.Fprintf(w.out, format, args...)
}

func (w *walkthrough) record(lane string, canary bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.second.add(lane, canary, err)
	if w.count {
		w.step.add(lane, canary, err)
	}
}

func run(ctx context.Context, out io.Writer, cfg config) ([]stepResult, error) {
	w := &walkthrough{out: out, second: newTally(), step: newTally()}
	redisURL := cfg.redisURL
	if redisURL == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return nil, fmt.Errorf("start embedded Redis: %w", err)
		}
		defer mr.Close()
		redisURL = "redis://" + mr.Addr() + "/0"
		w.printf("redis    embedded, in memory, at %s (pass --redis URL to use a real one)\n", mr.Addr())
	} else {
		w.printf("redis    %s\n", tunnel.RedactURL(redisURL))
	}
	// The commands printed name this Redis: while the walk-through runs,
	// rpr routes ls in another terminal shows the same table.
	cli := "--redis " + tunnel.RedactURL(redisURL)

	// The operator's connection and handle, for the routing table.
	operatorRedis, err := tunnel.Open(ctx, redisURL)
	if err != nil {
		return nil, err
	}
	defer operatorRedis.Close()
	operator := admin.New(operatorRedis, admin.Options{}).Service(service)
	table := operator.Routes()
	// A Redis that ran this before may hold its routes: start clean.
	for _, p := range []string{pattern, service + "/SayHello", service + "/SlowHello"} {
		if _, err := table.Remove(ctx, p); err != nil {
			return nil, err
		}
	}

	// The servers: v1 (the example Greeter) and v2, each in its lane.
	stopV1, err := startServer(ctx, redisURL, "v1", greeter.Server{})
	if err != nil {
		return nil, err
	}
	defer stopV1()
	stopV2, err := startServer(ctx, redisURL, "v2", v2Greeter{})
	if err != nil {
		return nil, err
	}
	defer stopV2()
	for _, lane := range []string{"v1", "v2"} {
		if err := waitForLane(ctx, operator, lane, func(st admin.LaneStatus) bool { return st.LiveWorkers > 0 }); err != nil {
			return nil, err
		}
	}
	w.printf("servers  lane v1: the example Greeter; lane v2: a new version that answers \"v2: hi, NAME\"\n")

	// Route every call to v1 before the first call, so none goes to the
	// default lane, which no server here serves.
	if err := apply(ctx, w, table, cli, "1. every call to v1", "v1"); err != nil {
		return nil, err
	}
	clientRedis, err := tunnel.Open(ctx, redisURL)
	if err != nil {
		return nil, err
	}
	defer clientRedis.Close()
	client, err := tunnel.NewClient(clientRedis, tunnel.ClientOptions{BizCode: "GRAY", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	w.printf("client   %d calls/s to SayHello; every tenth carries x-canary: true\n", cfg.rate)

	callCtx, stopCalling := context.WithCancel(ctx)
	var calling sync.WaitGroup
	calling.Go(func() { w.callLoop(callCtx, greeterv1.NewGreeterClient(client), cfg.rate) })
	calling.Go(func() { w.reportLoop(callCtx) })
	defer func() {
		stopCalling()
		calling.Wait()
	}()

	var results []stepResult
	step := func(name string) error {
		w.mu.Lock()
		w.step, w.count = newTally(), false
		w.mu.Unlock()
		if err := sleep(ctx, applyWithin); err != nil {
			return err
		}
		w.mu.Lock()
		w.count = true
		w.mu.Unlock()
		if err := sleep(ctx, cfg.step-applyWithin); err != nil {
			return err
		}
		w.mu.Lock()
		res := stepResult{name: name, total: w.step}
		w.count = false
		w.mu.Unlock()
		results = append(results, res)
		w.printf("         since the change applied: %s\n", summary(res.total))
		return nil
	}

	if err := step("1. every call to v1"); err != nil {
		return results, err
	}
	for _, s := range []struct {
		name  string
		rules []string
	}{
		{"2. 10% of the calls to v2", []string{"v1:90,v2:10"}},
		{"3. and every canary call to v2", []string{"x-canary=true => v2", "v1:90,v2:10"}},
		{"4. every call to v2", []string{"v2"}},
	} {
		if err := apply(ctx, w, table, cli, s.name, s.rules...); err != nil {
			return results, err
		}
		if err := step(s.name); err != nil {
			return results, err
		}
	}

	// 5. Roll back. v2 leaves the routes first; its server keeps running
	// until clients have applied the change and its lane is empty, so no
	// call is stranded; whatever is still there after it stops is moved
	// to v1 (rpr routes set does the same by itself, see its --help).
	name := "5. roll back: v2 out of the routes"
	if err := apply(ctx, w, table, cli, name, "v1"); err != nil {
		return results, err
	}
	if err := sleep(ctx, applyWithin); err != nil {
		return results, err
	}
	if err := waitForLane(ctx, operator, "v2", func(st admin.LaneStatus) bool { return st.Queued == 0 }); err != nil {
		return results, err
	}
	stopV2()
	res, err := operator.Drain(ctx, "v2", "v1")
	if err != nil {
		return results, err
	}
	w.printf("         lane v2 is empty (its server finished what it held), so its server stopped;\n")
	w.printf("         then what clients still sent there was moved to v1: %d moved, %d left\n", res.Moved, res.Left)
	w.printf("         $ rpr routes drain %s %s v2 --to v1\n", cli, service)
	if err := step(name); err != nil {
		return results, err
	}
	stopCalling()
	calling.Wait()

	calls, failed := 0, 0
	for _, r := range results {
		calls += total(r.total.all)
		failed += r.total.errors
	}
	w.printf("\nDone: %d calls counted, %d failed. Each change reached the client within a\n", calls, failed)
	w.printf("second, without a restart. Run the rpr routes commands above yourself against a\n")
	w.printf("real Redis (go run ./cmd/rpr routes --help).\n")
	return results, nil
}

// v2Greeter is the new version: it answers differently, so the client can
// tell the lanes apart.
type v2Greeter struct{ greeter.Server }

func (v2Greeter) SayHello(ctx context.Context, req *greeterv1.SayHelloRequest) (*greeterv1.SayHelloResponse, error) {
	if req.GetName() == "" {
		return nil, tunnel.Errorf(tunnel.InvalidArgument, "name is empty: say who to greet")
	}
	return &greeterv1.SayHelloResponse{Message: "v2: hi, " + req.GetName()}, nil
}

// laneOf says which version wrote reply.
func laneOf(reply string) string {
	if strings.HasPrefix(reply, "v2:") {
		return "v2"
	}
	return "v1"
}

// startServer serves impl in lane on its own connection (a server needs
// nothing but Redis); stop ends it and waits for its calls in flight.
func startServer(ctx context.Context, redisURL, lane string, impl greeterv1.GreeterServer) (stop func(), err error) {
	rdb, err := tunnel.Open(ctx, redisURL)
	if err != nil {
		return nil, err
	}
	srv, err := tunnel.NewServer(rdb, tunnel.ServerOptions{Lane: lane, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	greeterv1.RegisterGreeterServer(srv, impl)
	serveCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(serveCtx) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
			rdb.Close()
		})
	}, nil
}

// waitForLane waits until the lane's status satisfies ok.
func waitForLane(ctx context.Context, svc *admin.Service, lane string, ok func(admin.LaneStatus) bool) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		lanes, err := svc.Lanes(ctx)
		if err != nil {
			return err
		}
		for _, st := range lanes {
			if st.Lane == lane && ok(st) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lane %s: not in the expected state within 15s: %+v", lane, lanes)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// apply sets the route of every Greeter method to rules and prints the
// equivalent command; cli is its --redis flag.
func apply(ctx context.Context, w *walkthrough, table *admin.Routes, cli, name string, specs ...string) error {
	rules := make([]admin.RouteRule, len(specs))
	quoted := make([]string, len(specs))
	for i, spec := range specs {
		r, err := admin.ParseRouteRule(spec)
		if err != nil {
			return err
		}
		rules[i] = r
		quoted[i] = spec
		if strings.ContainsAny(spec, " =>") {
			quoted[i] = "'" + spec + "'"
		}
	}
	if err := table.Set(ctx, pattern, rules); err != nil {
		return err
	}
	w.printf("\n%s\n         $ rpr routes set %s %s %s\n", name, cli, pattern, strings.Join(quoted, " "))
	return nil
}

// callLoop calls SayHello rate times a second until ctx ends, every tenth
// call with the canary header.
func (w *walkthrough) callLoop(ctx context.Context, gc greeterv1.GreeterClient, rate int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var inFlight sync.WaitGroup
	defer inFlight.Wait()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		canary := n%10 == 9
		inFlight.Go(func() {
			var opts []tunnel.CallOption
			if canary {
				opts = append(opts, tunnel.WithHeader("x-canary", "true"))
			}
			callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			reply, err := gc.SayHello(callCtx, &greeterv1.SayHelloRequest{Name: fmt.Sprintf("caller-%d", n)}, opts...)
			w.record(laneOf(reply.GetMessage()), canary, err)
		})
	}
}

// reportLoop prints the second's shares every second until ctx ends.
func (w *walkthrough) reportLoop(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		w.mu.Lock()
		sec := w.second
		w.second = newTally()
		w.mu.Unlock()
		w.printf("  %3ds   %s\n", int(time.Since(start).Round(time.Second)/time.Second), summary(sec))
	}
}

// summary renders a tally: the share of each lane, of all calls and of
// the canary ones.
func summary(t tally) string {
	s := fmt.Sprintf("%4d calls: %-22s canary calls: %-22s", total(t.all), shares(t.all), shares(t.canary))
	if t.errors > 0 {
		s += fmt.Sprintf(" %d FAILED", t.errors)
	}
	return strings.TrimRight(s, " ")
}

func total(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

// shares renders counts as "v1 90.0%  v2 10.0%".
func shares(counts map[string]int) string {
	n := total(counts)
	if n == 0 {
		return "-"
	}
	lanes := make([]string, 0, len(counts))
	for lane := range counts {
		lanes = append(lanes, lane)
	}
	sort.Strings(lanes)
	parts := make([]string, len(lanes))
	for i, lane := range lanes {
		parts[i] = fmt.Sprintf("%s %5.1f%%", lane, 100*float64(counts[lane])/float64(n))
	}
	return strings.Join(parts, "  ")
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return errors.Join(errors.New("interrupted"), ctx.Err())
	}
}
