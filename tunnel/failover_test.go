package tunnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/logcapture"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// The failover tests run a steady load of unary calls through a sharded
// service while a Redis master is SIGKILLed and replaced (Cluster
// failover, Sentinel failover), then check what every call got:
//
//   - every call returns, none later than its deadline plus a bound;
//   - a call that succeeded was executed, and at most once... per attempt
//     the handler saw (executions are counted by the call's unique payload);
//   - a call reported NotExecuted was not executed;
//   - once the new master serves, calls succeed again, without restarting
//     anything.
//
// They report the failover window (from the kill to the last failed call)
// and the failures in it by code.

const failoverService = "test.v1.Failover"

// failoverDesc is a unary method that records each execution of its
// payload.
func failoverDesc(shards int) *tunnel.ServiceDesc {
	return &tunnel.ServiceDesc{ServiceName: failoverService, Methods: []tunnel.MethodDesc{{
		Service: failoverService, Name: "Do", Shards: shards,
		Handler: func(impl any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
			in := new(wrapperspb.StringValue)
			if err := decode(in); err != nil {
				return nil, err
			}
			impl.(*executions).add(in.GetValue())
			return in, nil
		},
	}}}
}

type executions struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *executions) add(v string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n[v]++
}

func (e *executions) count(v string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[v]
}

// callOutcome is what one call of the load got.
type callOutcome struct {
	value      string
	start, end time.Time
	err        error
}

// failoverLoad runs callers goroutines of calls (deadline timeout each)
// until stop is closed.
type failoverLoad struct {
	mu   sync.Mutex
	outs []callOutcome
	wg   sync.WaitGroup
	stop chan struct{}
}

func startFailoverLoad(client *tunnel.Client, m *tunnel.MethodDesc, callers int, timeout time.Duration) *failoverLoad {
	l := &failoverLoad{stop: make(chan struct{})}
	for g := range callers {
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				value := fmt.Sprintf("%d-%d", g, i)
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				o := callOutcome{value: value, start: time.Now()}
				o.err = client.Invoke(ctx, m, wrapperspb.String(value), new(wrapperspb.StringValue))
				o.end = time.Now()
				cancel()
				l.mu.Lock()
				l.outs = append(l.outs, o)
				l.mu.Unlock()
				if o.err != nil {
					time.Sleep(20 * time.Millisecond) // a failing caller does not spin
				}
			}
		})
	}
	return l
}

func (l *failoverLoad) finish() []callOutcome {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.outs
}

// failoverReport checks the outcomes of a load during which a master was
// killed at killed and replaced by recovered, and logs the window.
func failoverReport(t *testing.T, what string, outs []callOutcome, execs *executions, timeout time.Duration, killed, recovered time.Time) {
	t.Helper()
	const hangBound = 5 * time.Second // slack over the deadline: no call hangs
	codes := map[string]int{}
	var lastFailure time.Time
	var before, window, after, notExecuted int
	for _, o := range outs {
		if took := o.end.Sub(o.start); took > timeout+hangBound {
			t.Errorf("call %s took %v, past its %v deadline", o.value, took.Round(time.Millisecond), timeout)
		}
		runs := execs.count(o.value)
		switch {
		case o.err == nil && runs == 0:
			t.Errorf("call %s succeeded but its handler never ran", o.value)
		case o.err != nil && tunnel.NotExecuted(o.err) && runs > 0:
			t.Errorf("call %s was reported not executed but ran %d times: %v", o.value, runs, o.err)
		}
		if o.err != nil {
			codes[tunnel.CodeOf(o.err).String()]++
			if tunnel.NotExecuted(o.err) {
				notExecuted++
			}
			if o.end.After(lastFailure) {
				lastFailure = o.end
			}
		}
		switch {
		case o.end.Before(killed):
			before++
			if o.err != nil {
				t.Errorf("call %s failed before the kill: %v", o.value, o.err)
			}
		case o.start.After(recovered.Add(time.Second)):
			after++
			if o.err != nil {
				t.Errorf("call %s, made %v after the failover completed, failed: %v", o.value, o.start.Sub(recovered).Round(time.Millisecond), o.err)
			}
		default:
			window++
		}
	}
	if after == 0 {
		t.Errorf("%s: no call was made after the failover", what)
	}
	var byCode []string
	for c, n := range codes {
		byCode = append(byCode, fmt.Sprintf("%s=%d", c, n))
	}
	sort.Strings(byCode)
	failedFor := time.Duration(0)
	if lastFailure.After(killed) {
		failedFor = lastFailure.Sub(killed)
	}
	t.Logf("%s: %d calls (%d before the kill, %d during, %d after); failover done %v after the kill; last failed call ended %v after the kill; failures by code: %s (%d of them not executed)",
		what, len(outs), before, window, after, recovered.Sub(killed).Round(time.Millisecond), failedFor.Round(time.Millisecond), strings.Join(byCode, " "), notExecuted)
}

// runFailover starts a server and a client on their own connections
// (opened from url), loads them, calls kill, waits with recover, and
// reports.
func runFailover(t *testing.T, what, url string, shards int, kill func() (recovered time.Time)) {
	ctx := context.Background()
	logs := &logcapture.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	open := func() redis.UniversalClient {
		rdb, err := tunnel.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	execs := &executions{n: map[string]int{}}
	srv, err := tunnel.NewServer(open(), tunnel.ServerOptions{Logger: logger, Lease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	desc := failoverDesc(shards)
	srv.RegisterService(desc, execs)
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serveCtx) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if t.Failed() {
			t.Logf("logs (end):\n%s", tail(logs.String(), 60))
		}
	}()
	client, err := tunnel.NewClient(open(), tunnel.ClientOptions{Logger: logger, Breaker: tunnel.BreakerOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	m := &desc.Methods[0]
	waitFor(t, "the server answers", func() bool {
		return client.Invoke(ctx, m, wrapperspb.String("warm"), new(wrapperspb.StringValue)) == nil
	})

	const timeout = 2 * time.Second
	load := startFailoverLoad(client, m, 16, timeout)
	time.Sleep(time.Second)
	killed := time.Now()
	recovered := kill()
	time.Sleep(3 * time.Second)
	outs := load.finish()
	failoverReport(t, what, outs, execs, timeout, killed, recovered)
	if strings.Contains(logs.String(), "CROSSSLOT") {
		t.Errorf("a command crossed slots:\n%s", strings.Join(logs.Lines("CROSSSLOT"), "\n"))
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestClusterFailoverUnderLoad kills the master holding shard 1 of a
// 3-shard service on a 3-master Cluster, under load.
func TestClusterFailoverUnderLoad(t *testing.T) {
	cluster := redistest.StartCluster(t)
	const shards = 3
	masters := map[string]bool{}
	var victim string
	for shard := range shards {
		tag := failoverService
		if shard > 0 {
			tag = fmt.Sprintf("%s#%d", failoverService, shard)
		}
		m := cluster.MasterOf(redistest.Slot("rpr:v1:{" + tag + "}:req"))
		masters[m] = true
		if shard == 1 {
			victim = m
		}
	}
	if len(masters) < 2 {
		t.Fatalf("the 3 shards' keys are on %d master(s), want them spread over at least 2", len(masters))
	}
	runFailover(t, "Cluster: SIGKILL the master of shard 1 of 3", cluster.URL(), shards, func() time.Time {
		cluster.Kill(victim)
		cluster.WaitFailover(t, victim, 30*time.Second)
		return time.Now()
	})
}

// TestSentinelFailoverUnderLoad kills the master of a Sentinel setup under
// load; the client and server reach Redis through the sentinels.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	sentinel := redistest.StartSentinel(t)
	runFailover(t, "Sentinel: SIGKILL the master", sentinel.URL(), 1, func() time.Time {
		sentinel.KillMaster(t)
		sentinel.WaitFailover(t, 30*time.Second)
		return time.Now()
	})
}
