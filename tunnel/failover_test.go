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
//   - a call that succeeded was executed (executions are counted by the
//     call's unique payload);
//   - a call reported NotExecuted was not executed;
//   - no call fails before the kill, and calls made from a second after
//     the new master serves succeed, without restarting anything.
//
// They report the failover window (from the kill to the last failed call),
// the failures in it by code, and how many calls ran more than once (a
// write the killed master had not replicated, such as a delivery, is lost
// with it; rpr does not WAIT for replicas).

const failoverService = "test.v1.Failover"

// failoverDesc is a unary method that records each execution of its
// payload.
func failoverDesc(shards int) *tunnel.ServiceDesc {
	info := &tunnel.ServiceInfo{Name: failoverService, Shards: shards}
	return &tunnel.ServiceDesc{Service: info, Methods: []tunnel.MethodDesc{{
		Service: info, Name: "Do",
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

func (e *executions) total() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.n)
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

// endedAfter counts the calls made after t that have returned.
func (l *failoverLoad) endedAfter(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, o := range l.outs {
		if o.start.After(t) {
			n++
		}
	}
	return n
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
	var before, window, after, notExecuted, twice int
	for _, o := range outs {
		if took := o.end.Sub(o.start); took > timeout+hangBound {
			t.Errorf("call %s took %v, past its %v deadline", o.value, took.Round(time.Millisecond), timeout)
		}
		runs := execs.count(o.value)
		if runs > 1 {
			twice++
		}
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
	t.Logf("%s: %d calls (%d before the kill, %d during, %d after); failover done %v after the kill; last failed call ended %v after the kill; failures by code: %s (%d of them not executed); %d calls ran more than once",
		what, len(outs), before, window, after, recovered.Sub(killed).Round(time.Millisecond), failedFor.Round(time.Millisecond), strings.Join(byCode, " "), notExecuted, twice)
}

// runFailover starts a server and a client on their own connections
// (opened from url), loads them, calls kill, waits with recover, and
// reports.
func runFailover(t *testing.T, what, url string, shards int, kill func() (recovered time.Time)) {
	ctx := context.Background()
	logs := &logcapture.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() { // runs last: after the server has stopped
		if t.Failed() {
			t.Logf("logs (end):\n%s", tail(logs.String(), 60))
		}
	})
	execs := &executions{n: map[string]int{}}
	desc := failoverDesc(shards)
	startServer(t, mustOpen(t, ctx, url), tunnel.ServerOptions{Logger: logger, Lease: 2 * time.Second},
		func(s *tunnel.Server) { s.RegisterService(desc, execs) })
	client, err := tunnel.NewClient(mustOpen(t, ctx, url), tunnel.ClientOptions{Logger: logger, Breaker: tunnel.BreakerOptions{Disabled: true}})
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
	waitFor(t, "calls to succeed under load", func() bool { return execs.total() >= 100 })
	killed := time.Now()
	recovered := kill()
	// Calls made from a second after the failover completed on must
	// succeed: the load runs on until calls made 3s after it have been
	// answered, so at least 2s of calls are checked.
	waitLong(t, 30*time.Second, "calls made 3s after the failover to return", func() bool {
		return load.endedAfter(recovered.Add(3*time.Second)) >= 16
	}, nil)
	outs := load.finish()
	failoverReport(t, what, outs, execs, timeout, killed, recovered)
	if strings.Contains(logs.String(), "CROSSSLOT") {
		t.Errorf("a command crossed slots:\n%s", strings.Join(logs.Lines("CROSSSLOT"), "\n"))
	}
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
