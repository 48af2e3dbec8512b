package redistest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSentinel starts one Sentinel setup, checks what the helper reports,
// fails the master over and brings it back, and then checks that the
// cleanup left no process running.
func TestSentinel(t *testing.T) {
	t.Parallel()
	type proc struct {
		pid int
		dir string
	}
	var procs []proc
	t.Run("lifecycle", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		begin := time.Now()
		se := StartSentinel(t, WithMasterName("orders"))
		t.Logf("StartSentinel took %v", time.Since(begin))

		data, sentinels := se.DataAddrs(), se.SentinelAddrs()
		if len(data) != 2 || len(sentinels) != 3 || se.MasterName() != "orders" {
			t.Fatalf("DataAddrs %v SentinelAddrs %v MasterName %q", data, sentinels, se.MasterName())
		}
		if want := "redis+sentinel://" + strings.Join(sentinels, ",") + "/orders"; se.URL() != want {
			t.Fatalf("URL = %q, want %q", se.URL(), want)
		}
		if m := se.Master(); m != data[0] {
			t.Fatalf("Master = %q, want %s", m, data[0])
		}
		for _, a := range sentinels {
			if role, err := roleOf(a); err != nil || role != "sentinel" {
				t.Fatalf("ROLE of %s = %q, %v", a, role, err)
			}
			// Sentinel rewrote its own config: it is writable, as it must be.
			if n := se.Node(a); !strings.Contains(readFile(t, n.Dir()+"/"+sentinelConfName), "sentinel myid") {
				t.Errorf("sentinel %s did not rewrite its config", a)
			}
		}
		if role, err := roleOf(data[1]); err != nil || role != "slave" {
			t.Fatalf("ROLE of %s = %q, %v; want slave", data[1], role, err)
		}

		rdb := se.Client(t)
		if err := rdb.Set(ctx, "k", "before", 0).Err(); err != nil {
			t.Fatal(err)
		}

		begin = time.Now()
		old := se.KillMaster(t)
		if old != data[0] || se.Node(old).Running() {
			t.Fatalf("KillMaster = %s (running %v), want %s killed", old, se.Node(old).Running(), data[0])
		}
		promoted := se.WaitFailover(t, 30*time.Second)
		t.Logf("failover from %s to %s took %v", old, promoted, time.Since(begin))
		if promoted != data[1] || se.Master() != promoted {
			t.Fatalf("WaitFailover = %s, Master = %s; want %s", promoted, se.Master(), data[1])
		}
		for {
			err := rdb.Set(ctx, "k", "after", 0).Err()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("SET after failover: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}

		begin = time.Now()
		se.Restart(t, old)
		se.WaitHealthy(t, 30*time.Second)
		t.Logf("restarted %s rejoined as a replica in %v", old, time.Since(begin))
		// The sentinels turn the old master into a replica of the new one.
		// On a loaded machine they may then fail over once more, back to
		// it; either way the two must be master and replica again.
		role, err := roleOf(old)
		if err != nil {
			t.Fatalf("ROLE of the restarted old master: %v", err)
		}
		if want := map[bool]string{true: "master", false: "slave"}[se.Master() == old]; role != want {
			t.Fatalf("ROLE of the restarted old master = %q; want %s (the sentinels name %s as master)", role, want, se.Master())
		}
		if se.Master() == old {
			t.Logf("the sentinels failed over a second time, back to %s", old)
		}
		if v, err := command(old, "GET", "k"); err != nil || v != "after" {
			t.Fatalf("GET k on the new replica = %v, %v; want the data written after failover", v, err)
		}
		for _, n := range se.all() {
			procs = append(procs, proc{n.PID(), n.Dir()})
		}
	})
	for _, p := range procs {
		if ours(p.pid, p.dir) {
			t.Errorf("pid %d in %s still running after cleanup", p.pid, p.dir)
		}
	}
}

// Options meant for StartSentinel never reach a data node's redis.conf.
func TestPseudoDirectives(t *testing.T) {
	t.Parallel()
	var c config
	for _, o := range []Option{WithMasterName("a"), WithConfig("maxmemory", "1mb"), WithDownAfter(3 * time.Second), WithMasterName("b")} {
		o(&c)
	}
	if got := pseudo(c.directives, "master-name", "rpr"); got != "b" {
		t.Errorf("master-name = %q, want the last one, b", got)
	}
	if got := pseudo(c.directives, "down-after", "1000"); got != "3000" {
		t.Errorf("down-after = %q, want 3000", got)
	}
	if got := pseudo(c.directives, "nothing", "def"); got != "def" {
		t.Errorf("default = %q", got)
	}
	if d := dataDirectives(c.directives); len(d) != 1 || d[0] != [2]string{"maxmemory", "1mb"} {
		t.Errorf("dataDirectives = %v", d)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
