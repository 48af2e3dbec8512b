package tunnel_test

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

// decisionLog is a go-redis hook that records the limiter's decisions as
// Redis made them: the reply of every limit script run (recognised by its
// rate-limit state keys) carries whether the call was admitted and Redis's
// time in microseconds.
type decisionLog struct {
	mu       sync.Mutex
	admitted []int64 // Redis times (us) of admitted calls
	refused  int
	latest   atomic.Int64 // the latest decision's Redis time (us)
	scripts  atomic.Int64 // limit script runs
}

// isLimitScript reports whether cmd runs the limit script: EVALSHA or EVAL
// whose first key is a rate-limit state key.
func isLimitScript(cmd redis.Cmder) bool {
	args := cmd.Args()
	if name := cmd.Name(); (name != "evalsha" && name != "eval") || len(args) < 4 {
		return false
	}
	key, _ := args[3].(string)
	return strings.Contains(key, "}:rl:")
}

func (d *decisionLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (d *decisionLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil || !isLimitScript(cmd) {
			return err
		}
		d.scripts.Add(1)
		res, rerr := cmd.(*redis.Cmd).Int64Slice()
		if rerr != nil || len(res) != 4 {
			return err
		}
		d.mu.Lock()
		if res[0] == 1 {
			d.admitted = append(d.admitted, res[3])
		} else {
			d.refused++
		}
		d.mu.Unlock()
		for {
			old := d.latest.Load()
			if res[3] <= old || d.latest.CompareAndSwap(old, res[3]) {
				break
			}
		}
		return err
	}
}

func (d *decisionLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (d *decisionLog) snapshot() (admitted []int64, refused int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.admitted), d.refused
}

// setLimit stores a rule through the operator handle, failing the test on
// error.
func setLimit(t *testing.T, rdb redis.UniversalClient, service string, r admin.LimitRule) admin.LimitRule {
	t.Helper()
	stored, err := admin.New(rdb, admin.Options{}).Service(service).Limits().Set(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return stored
}

// newLimitClient makes a client on a Redis connection of its own, with
// hooks on that connection; it reads the service's rules on its first call.
func newLimitClient(t *testing.T, e *env, opts tunnel.ClientOptions, hooks ...redis.Hook) *tunnel.Client {
	t.Helper()
	conn := e.redis.Client(t)
	for _, h := range hooks {
		conn.AddHook(h)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	c, err := tunnel.NewClient(conn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func echoAs(ctx context.Context, c *tunnel.Client, name, caller, tier string) error {
	var opts []tunnel.CallOption
	if caller != "" {
		opts = append(opts, tunnel.WithHeader(tunnel.CallerHeader, caller))
	}
	if tier != "" {
		opts = append(opts, tunnel.WithHeader(tunnel.TierHeader, tier))
	}
	return c.Invoke(ctx, method(name), wrapperspb.String("x"), new(wrapperspb.StringValue), opts...)
}

// checkRefusal checks that err is a limiter refusal with a retry-after hint
// in (0, window].
func checkLimited(t *testing.T, err error, window time.Duration) {
	t.Helper()
	if tunnel.CodeOf(err) != tunnel.ResourceExhausted || !tunnel.NotExecuted(err) {
		t.Fatalf("want RESOURCE_EXHAUSTED, not executed; got %v", err)
	}
	after, ok := tunnel.RetryAfter(err)
	if !ok || after <= 0 || after > window {
		t.Fatalf("retry-after %v (present %v), want in (0, %v]: %v", after, ok, window, err)
	}
	if r := tunnel.ErrorReason(err); r != tunnel.ReasonRateLimited {
		t.Fatalf("reason %q, want %s: %v", r, tunnel.ReasonRateLimited, err)
	}
}

// TestLimitAccuracy is the test: a limit of L per window W, four
// clients (each on its own Redis connection) hammering it concurrently for
// 3 W. Every admitted decision's Redis time is recorded; then
//   - log, and gcra with burst 1: every window [t, t+W) holds at most L;
//   - gcra with burst B: any i..j of the admitted calls satisfy the GCRA
//     guarantee j-i+1 <= B + (t_j - t_i)/T, T = W/L (so a window holds at
//     most L+B-1);
//   - while saturated, every aligned window [t0+kW, t0+(k+1)W) after the
//     first admits at least 0.95 L (not asserted for burst 1, which loses
//     the time by which each call arrives late).
func TestLimitAccuracy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		algorithm string
		burst     int64
	}{
		{"log", admin.LimitLog, 0},
		{"gcra", admin.LimitGCRA, 0},
		{"gcra-burst1", admin.LimitGCRA, 1},
	} {
		t.Run(tc.name, func(t *testing.T) { testLimitAccuracy(t, tc.algorithm, tc.burst) })
	}
}

func testLimitAccuracy(t *testing.T, algorithm string, burst int64) {
	const (
		limit   = 50
		window  = time.Second
		clients = 4
	)
	e := newEnv(t, envConfig{})
	rule := setLimit(t, e.rdb, echoService, admin.LimitRule{Name: "hammer", Method: echoService + "/Echo", Tier: "*",
		Limit: limit, Window: window, Algorithm: algorithm, Burst: burst})
	decisions := &decisionLog{}
	var cs []*tunnel.Client
	for range clients {
		cs = append(cs, newLimitClient(t, e, tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)}, decisions))
	}

	W := window.Microseconds()
	var stop atomic.Bool
	var unexpected atomic.Int64
	var wg sync.WaitGroup
	giveUp := time.Now().Add(30 * time.Second)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && time.Now().Before(giveUp) {
				err := echoAs(context.Background(), c, "Echo", "tenant-a", "")
				if err == nil {
					continue
				}
				after, _ := tunnel.RetryAfter(err)
				if tunnel.CodeOf(err) != tunnel.ResourceExhausted || !tunnel.NotExecuted(err) || after <= 0 || after > window {
					if unexpected.Add(1) <= 5 {
						t.Errorf("client %d: %v (retry after %v)", i, err, after)
					}
				}
			}
		}()
	}
	// Hammer until Redis's clock is 3 W past the first admitted call.
	for !stop.Load() {
		admitted, _ := decisions.snapshot()
		if len(admitted) > 0 && decisions.latest.Load() >= admitted[0]+3*W {
			stop.Store(true)
		}
		if time.Now().After(giveUp) {
			t.Fatal("the clients did not hammer for 3 windows within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()

	admitted, refused := decisions.snapshot()
	slices.Sort(admitted)
	t0 := admitted[0]
	// maxIn is the most admitted calls in a window [t, t+W) starting at or
	// after from (the busiest such window starts at an admitted call).
	maxIn := func(from int64) int {
		most, j := 0, 0
		for i, ti := range admitted {
			for j < len(admitted) && admitted[j] < ti+W {
				j++
			}
			if ti >= from {
				most = max(most, j-i)
			}
		}
		return most
	}
	var perWindow []int
	for k := int64(0); k < 3; k++ {
		n := 0
		for _, ts := range admitted {
			if ts >= t0+k*W && ts < t0+(k+1)*W {
				n++
			}
		}
		perWindow = append(perWindow, n)
	}
	t.Logf("%s limit %d per %v (burst %d): %d admitted, %d refused in 3 windows; aligned windows from the first admission: %v; busiest sliding window: %d overall, %d after the first window",
		algorithm, limit, window, rule.Burst, len(admitted), refused, perWindow, maxIn(t0), maxIn(t0+W))

	if algorithm == admin.LimitLog || burst == 1 {
		if most := maxIn(t0); most > limit {
			t.Errorf("a window of %v admitted %d calls, over the limit %d", window, most, limit)
		}
	} else {
		T := int64(math.Ceil(float64(W) / limit))
		for i := range admitted {
			for j := i; j < len(admitted); j++ {
				if n := int64(j - i + 1); n > rule.Burst+(admitted[j]-admitted[i])/T {
					t.Fatalf("GCRA guarantee broken: %d calls admitted within %dus (burst %d, interval %dus)", n, admitted[j]-admitted[i], rule.Burst, T)
				}
			}
		}
		if most := maxIn(t0); int64(most) > limit+rule.Burst-1 {
			t.Errorf("a window of %v admitted %d calls, over limit+burst-1 = %d", window, most, limit+rule.Burst-1)
		}
	}
	if burst != 1 {
		for k := 1; k < 3; k++ {
			if float64(perWindow[k]) < 0.95*limit {
				t.Errorf("saturated window %d admitted %d calls, under 0.95 × %d", k, perWindow[k], limit)
			}
		}
	}
	if refused == 0 {
		t.Error("nothing was refused: the clients did not saturate the limit")
	}
}

// TestLimitChangesApplyAtRuntime sets a limit while calls run, then
// removes it: refusals start, then stop, with no restart.
func TestLimitChangesApplyAtRuntime(t *testing.T) {
	e := newEnv(t, envConfig{})
	c := newLimitClient(t, e, tunnel.ClientOptions{})
	var refusals, okStreak, lastRefusal atomic.Int64
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			err := echoAs(context.Background(), c, "Echo", "", "")
			switch {
			case err == nil:
				okStreak.Add(1)
			case tunnel.CodeOf(err) == tunnel.ResourceExhausted:
				refusals.Add(1)
				okStreak.Store(0)
				lastRefusal.Store(time.Now().UnixNano())
			default:
				t.Errorf("call: %v", err)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer func() {
		stop.Store(true)
		<-done
	}()
	waitFor(t, "calls to run", func() bool { return okStreak.Load() > 10 })
	if n := refusals.Load(); n != 0 {
		t.Fatalf("%d refusals before any limit was set", n)
	}

	set := time.Now()
	setLimit(t, e.rdb, echoService, admin.LimitRule{Name: "runtime", Method: "Echo", Limit: 10, Window: time.Second})
	waitFor(t, "refusals after the limit was set", func() bool { return refusals.Load() > 0 })
	t.Logf("first refusal %v after the rule was set", time.Since(set).Round(time.Millisecond))

	removed := time.Now()
	if ok, err := admin.New(e.rdb, admin.Options{}).Service(echoService).Limits().Remove(context.Background(), "runtime"); err != nil || !ok {
		t.Fatalf("Limits.Remove: %v, %v", ok, err)
	}
	// 50 successes in a row cannot happen under 10 per second.
	waitFor(t, "refusals to stop after the limit was removed", func() bool { return okStreak.Load() >= 50 })
	t.Logf("last refusal %v after the rule was removed", time.Unix(0, lastRefusal.Load()).Sub(removed).Round(time.Millisecond))
}

// commandNames is a go-redis hook recording the names of the commands a
// client sends, leaving out what is not per call: its once-a-second
// refresh pipeline (the one that starts with TIME) and the handshake of a
// new pooled connection (HELLO, CLIENT SETINFO).
type commandNames struct {
	mu    sync.Mutex
	names map[string]int
}

func (c *commandNames) add(name string) {
	if name == "hello" || name == "client" || name == "auth" || name == "select" {
		return // a new pooled connection's handshake
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.names == nil {
		c.names = map[string]int{}
	}
	c.names[name]++
}

func (c *commandNames) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.names
	c.names = nil
	return out
}

func (c *commandNames) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmd.Name()
		if isLimitScript(cmd) {
			name = "limit-script"
		}
		c.add(name)
		return next(ctx, cmd)
	}
}

func (c *commandNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != "time" {
			for _, cmd := range cmds {
				c.add(cmd.Name())
			}
		}
		return next(ctx, cmds)
	}
}

// TestLimitCostsNothingWhenNoRuleApplies counts the commands of unary
// calls: with no rule, and with rules for other methods and tiers, a call
// sends its request and reads its response and nothing else; with a rule
// that applies, it sends exactly one limit script more.
func TestLimitCostsNothingWhenNoRuleApplies(t *testing.T) {
	e := newEnv(t, envConfig{})
	sent := &commandNames{}
	c := newLimitClient(t, e, tunnel.ClientOptions{}, sent)
	ctx := context.Background()
	const calls = 20
	run := func(phase string) map[string]int {
		t.Helper()
		sent.take()
		for range calls {
			if err := echoAs(ctx, c, "Echo", "", ""); err != nil {
				t.Fatalf("%s: %v", phase, err)
			}
		}
		names := sent.take()
		total := 0
		for _, n := range names {
			total += n
		}
		t.Logf("%s: %d calls sent %v (%.2f commands per call)", phase, calls, names, float64(total)/calls)
		return names
	}
	onlyCall := func(phase string, names map[string]int) {
		t.Helper()
		for name := range names {
			if name != "xadd" && name != "xreadgroup" {
				t.Errorf("%s: calls sent %s, want only xadd and xreadgroup: %v", phase, name, names)
			}
		}
	}
	if err := echoAs(ctx, c, "Echo", "", ""); err != nil { // sets the service up
		t.Fatal(err)
	}
	onlyCall("no rules", run("no rules"))

	// Rules for another method and another tier; one for Meta tells when
	// the client has read them.
	setLimit(t, e.rdb, echoService, admin.LimitRule{Name: "fail-only", Method: "Fail", Limit: 1000, Window: time.Second})
	setLimit(t, e.rdb, echoService, admin.LimitRule{Name: "vip-echo", Method: "Echo", Tier: "vip", Limit: 1000, Window: time.Second})
	setLimit(t, e.rdb, echoService, admin.LimitRule{Name: "meta", Method: "Meta", Limit: 100000, Window: time.Second})
	waitFor(t, "the client to read the rules", func() bool {
		if err := echoAs(ctx, c, "Meta", "", ""); err != nil {
			t.Fatal(err)
		}
		return sent.take()["limit-script"] > 0
	})
	onlyCall("rules for other methods and tiers", run("rules for other methods and tiers"))

	setLimit(t, e.rdb, echoService, admin.LimitRule{Name: "all", Method: "*", Limit: 100000, Window: time.Second})
	waitFor(t, "the client to read the rule", func() bool {
		if err := echoAs(ctx, c, "Echo", "", ""); err != nil {
			t.Fatal(err)
		}
		return sent.take()["limit-script"] > 0
	})
	names := run("a rule that applies")
	if names["limit-script"] != calls {
		t.Errorf("a rule that applies: %d limit script runs for %d calls, want one each", names["limit-script"], calls)
	}
	delete(names, "limit-script")
	onlyCall("a rule that applies", names)
}
