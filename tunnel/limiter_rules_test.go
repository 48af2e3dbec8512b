package tunnel_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestLimitTiersAndCallers checks that rules apply by tier, count per
// caller (x-rpr-caller, else the client's id), refuse with a retry-after,
// and are counted in rpr.client.limiter.refused.
func TestLimitTiersAndCallers(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	setLimit(t, e.rdb, echoService, admin.LimitRule{Name: "free", Method: "*", Tier: "free", Limit: 2, Window: time.Minute})
	setLimit(t, e.rdb, echoService, admin.LimitRule{Name: "vip", Method: "*", Tier: "vip", Limit: 5, Window: time.Minute, Algorithm: admin.LimitGCRA})
	setLimit(t, e.rdb, echoService, admin.LimitRule{Name: "anyone-idem", Method: echoService + "/Idem", Tier: "*", Limit: 1, Window: time.Minute})
	c := newLimitClient(t, e, tunnel.ClientOptions{})

	admits := func(caller, tier string, want int, window time.Duration) {
		t.Helper()
		for i := range want {
			if err := echoAs(ctx, c, "Echo", caller, tier); err != nil {
				t.Fatalf("%s (%s) call %d: %v", caller, tier, i+1, err)
			}
		}
		checkLimited(t, echoAs(ctx, c, "Echo", caller, tier), window)
	}
	admits("ann", "free", 2, time.Minute)
	admits("bob", "free", 2, time.Minute) // another caller, another budget
	admits("vic", "vip", 5, time.Minute)
	for i := range 10 { // tier normal: no rule
		if err := echoAs(ctx, c, "Echo", "nat", ""); err != nil {
			t.Fatalf("normal tier call %d: %v", i+1, err)
		}
	}
	// A rule for one method leaves the others alone and applies to every
	// tier; without x-rpr-caller the caller is the client.
	if err := echoAs(ctx, c, "Idem", "", ""); err != nil {
		t.Fatal(err)
	}
	checkLimited(t, echoAs(ctx, c, "Idem", "", ""), time.Minute)
	other := newLimitClient(t, e, tunnel.ClientOptions{})
	if err := echoAs(ctx, other, "Idem", "", ""); err != nil {
		t.Fatalf("another client is another caller: %v", err)
	}
	// ann's refusal names the rule.
	if err := echoAs(ctx, c, "Echo", "ann", "free"); !strings.Contains(fmt.Sprint(err), `rate limit "free"`) {
		t.Errorf("refusal does not name its rule: %v", err)
	}
}

// TestLimitKeyFunc checks that ClientOptions.LimitKey decides who the
// caller is and which tier it is in.
func TestLimitKeyFunc(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	setLimit(t, e.rdb, echoService, admin.LimitRule{Name: "gold", Method: "*", Tier: "gold", Limit: 3, Window: time.Minute})
	var asked atomic.Int64
	c := newLimitClient(t, e, tunnel.ClientOptions{LimitKey: func(_ context.Context, method string, md tunnel.Metadata) (string, string) {
		asked.Add(1)
		if method != echoService+"/Echo" {
			t.Errorf("LimitKey got method %q", method)
		}
		return md.Get("tenant"), "gold"
	}})
	call := func(tenant, caller string) error {
		return c.Invoke(ctx, method("Echo"), wrapperspb.String("x"), new(wrapperspb.StringValue),
			tunnel.WithHeader("tenant", tenant), tunnel.WithHeader(tunnel.CallerHeader, caller))
	}
	for i := range 3 { // one tenant, whatever x-rpr-caller says
		if err := call("acme", fmt.Sprint("caller-", i)); err != nil {
			t.Fatal(err)
		}
	}
	checkLimited(t, call("acme", "caller-9"), time.Minute)
	if err := call("globex", "caller-0"); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	if asked.Load() != 5 {
		t.Errorf("LimitKey called %d times for 5 calls", asked.Load())
	}
}

// TestLimitRetryAfterIsEnough waits the retry-after a refusal gives and
// checks the next call is admitted, for both algorithms.
func TestLimitRetryAfterIsEnough(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	setLimit(t, e.rdb, echoService, admin.LimitRule{Name: "log", Method: "Echo", Limit: 2, Window: 1500 * time.Millisecond})
	setLimit(t, e.rdb, echoService, admin.LimitRule{Name: "gcra", Method: "Idem", Limit: 2, Window: 1500 * time.Millisecond, Algorithm: admin.LimitGCRA})
	c := newLimitClient(t, e, tunnel.ClientOptions{})
	for _, name := range []string{"Echo", "Idem"} {
		for i := range 2 {
			if err := echoAs(ctx, c, name, "", ""); err != nil {
				t.Fatalf("%s call %d: %v", name, i+1, err)
			}
		}
		err := echoAs(ctx, c, name, "", "")
		checkLimited(t, err, 1500*time.Millisecond)
		after, _ := tunnel.RetryAfter(err)
		time.Sleep(after)
		if err := echoAs(ctx, c, name, "", ""); err != nil {
			t.Fatalf("%s: refused again after waiting the retry-after %v: %v", name, after, err)
		}
	}
}

// TestLimitAsyncEnqueue checks that async enqueues are limited before they
// enter Redis.
func TestLimitAsyncEnqueue(t *testing.T) {
	w := newAsyncWorld(t, tunnel.ClientOptions{})
	if _, err := admin.New(w.rdb, admin.Options{}).Service(jobsService).Limits().Set(context.Background(), admin.LimitRule{Name: "jobs", Method: "Do", Limit: 3, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := w.enqueue("Do", fmt.Sprint("job-", i)); err != nil {
			t.Fatalf("enqueue %d: %v", i+1, err)
		}
	}
	_, err := w.enqueue("Do", "job-3")
	checkLimited(t, err, time.Minute)
	if stream, _ := w.queued(); stream != 3 {
		t.Errorf("%d requests queued, want 3: a refused one entered Redis", stream)
	}
	if _, err := w.enqueue("Do", "job-4", tunnel.WithHeader(tunnel.CallerHeader, "another")); err != nil {
		t.Errorf("another caller: %v", err)
	}
	if _, err := w.enqueue("Redo", "job-5"); err != nil {
		t.Errorf("another method: %v", err)
	}
}

// TestLimitAlgorithmChange switches a rule between the algorithms while
// its state exists: the state of the other type is started afresh instead
// of failing calls.
func TestLimitAlgorithmChange(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	setLimit(t, e.rdb, echoService, admin.LimitRule{Name: "switch", Method: "Echo", Limit: 1000, Window: time.Minute})
	c := newLimitClient(t, e, tunnel.ClientOptions{})
	state := "rpr:v1:{" + echoService + "}:rl:switch:" + c.ID()
	if err := echoAs(ctx, c, "Echo", "", ""); err != nil {
		t.Fatal(err)
	}
	if typ := e.rdb.Type(ctx, state).Val(); typ != "zset" {
		t.Fatalf("log state %s is a %q, want zset", state, typ)
	}
	setLimit(t, e.rdb, echoService, admin.LimitRule{Name: "switch", Method: "Echo", Limit: 1000, Window: time.Minute, Algorithm: admin.LimitGCRA})
	waitFor(t, "the state to become GCRA's", func() bool {
		if err := echoAs(ctx, c, "Echo", "", ""); err != nil {
			t.Fatal(err)
		}
		return e.rdb.Type(ctx, state).Val() == "string"
	})
	if ttl := e.rdb.PTTL(ctx, state).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("GCRA state expires in %v, want within a window", ttl)
	}
}

// TestLimitInvalidRulesIgnored checks that a malformed rule in the hash is
// ignored (and logged) while valid ones apply, and that Limits.List reports
// it.
func TestLimitInvalidRulesIgnored(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	if err := e.rdb.HSet(ctx, admin.New(e.rdb, admin.Options{}).Service(echoService).Limits().Key(), "broken", `{"limit": "lots"}`).Err(); err != nil {
		t.Fatal(err)
	}
	setLimit(t, e.rdb, echoService, admin.LimitRule{Name: "one", Method: "Echo", Limit: 1, Window: time.Minute})
	c := newLimitClient(t, e, tunnel.ClientOptions{})
	if err := echoAs(ctx, c, "Echo", "", ""); err != nil {
		t.Fatal(err)
	}
	checkLimited(t, echoAs(ctx, c, "Echo", "", ""), time.Minute)
	if !strings.Contains(e.logs.String(), "invalid rate-limit rule") {
		t.Error("the invalid rule was not logged")
	}
	rules, invalid, err := admin.New(e.rdb, admin.Options{}).Service(echoService).Limits().List(ctx)
	if err != nil || len(rules) != 1 || rules[0].Name != "one" || len(invalid) != 1 || invalid[0].Name != "broken" {
		t.Fatalf("Limits.List = %+v, %+v, %v", rules, invalid, err)
	}
}
