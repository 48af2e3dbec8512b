package redistest

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestCluster starts one cluster, checks what the helper reports against
// what the cluster does, fails a master over and brings it back, and then
// checks that the cleanup left no node running.
func TestCluster(t *testing.T) {
	t.Parallel()
	type proc struct {
		pid  int
		dir  string
		addr string
	}
	var procs []proc
	t.Run("lifecycle", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		begin := time.Now()
		cl := StartCluster(t)
		t.Logf("StartCluster took %v", time.Since(begin))

		addrs := cl.Addrs()
		if len(addrs) != 6 {
			t.Fatalf("Addrs = %v, want 6 nodes", addrs)
		}
		for _, a := range addrs {
			n := cl.Node(a)
			if !ours(n.PID(), n.Dir()) {
				t.Fatalf("node %s: pid %d does not run in %s", a, n.PID(), n.Dir())
			}
			if port := n.Port(); port < clusterPortMin || port > clusterPortMax {
				t.Errorf("node %s: port outside %d-%d", a, clusterPortMin, clusterPortMax)
			}
		}
		if want := "redis://" + strings.Join(addrs, ","); cl.URL() != want {
			t.Errorf("URL = %q, want %q", cl.URL(), want)
		}
		masters := cl.Masters()
		if len(masters) != 3 || !slices.Equal(masters, addrs[:3]) {
			t.Fatalf("Masters = %v, want the first three of %v", masters, addrs)
		}

		rdb := cl.Client(t)
		// One key per master, plus the edges of the slot range.
		keys := []string{KeyInSlot(0), KeyInSlot(6000), KeyInSlot(12000), KeyInSlot(16383), "rpr:v1:{svc}:req"}
		owners := map[string]bool{}
		for _, k := range keys {
			got, err := rdb.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if int(got) != Slot(k) {
				t.Fatalf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, Slot(k), got)
			}
			if err := rdb.Set(ctx, k, "v-"+k, 0).Err(); err != nil {
				t.Fatalf("SET %s through the cluster client: %v", k, err)
			}
			owner := cl.MasterOf(Slot(k))
			owners[owner] = true
			// The key is on that master: a plain GET there answers, no MOVED.
			if v, err := command(owner, "GET", k); err != nil || v != "v-"+k {
				t.Fatalf("GET %s on MasterOf(%d) = %s: %v, %v", k, Slot(k), owner, v, err)
			}
		}
		if len(owners) != 3 {
			t.Errorf("keys landed on %d masters, want 3: %v", len(owners), owners)
		}
		if Slot("a{svc}b") != Slot("{svc}") || Slot("{}x") == Slot("{}") {
			t.Error("hash tags are not handled like Redis does")
		}

		// Fail over the master of one slot.
		key := "rpr:v1:{failover}:k"
		slot := Slot(key)
		old := cl.MasterOf(slot)
		if err := rdb.Set(ctx, key, "before", 0).Err(); err != nil {
			t.Fatal(err)
		}
		begin = time.Now()
		cl.Kill(old)
		if n := cl.Node(old); n.Running() || ours(n.PID(), n.Dir()) {
			t.Fatalf("%s still running after Kill", old)
		}
		promoted := cl.WaitFailover(t, old, 30*time.Second)
		t.Logf("failover of %s to %s took %v", old, promoted, time.Since(begin))
		if promoted == old || cl.MasterOf(slot) != promoted {
			t.Fatalf("WaitFailover = %s, MasterOf(%d) = %s, old master %s", promoted, slot, cl.MasterOf(slot), old)
		}
		if ms := cl.Masters(); len(ms) != 3 || slices.Contains(ms, old) || !slices.Contains(ms, promoted) {
			t.Fatalf("Masters after failover = %v", ms)
		}
		// The client made before the failover finds the new master itself.
		for {
			err := rdb.Set(ctx, key, "after", 0).Err()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("SET %s after failover: %v", key, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if v, err := rdb.Get(ctx, key).Result(); err != nil || v != "after" {
			t.Fatalf("GET %s after failover = %q, %v", key, v, err)
		}

		// The old master comes back as a replica.
		begin = time.Now()
		cl.Start(t, old)
		cl.WaitHealthy(t, 30*time.Second)
		t.Logf("restarted %s rejoined in %v", old, time.Since(begin))
		if role, err := roleOf(old); err != nil || role != "slave" {
			t.Fatalf("ROLE of the restarted old master = %q, %v; want slave", role, err)
		}

		for _, a := range addrs {
			procs = append(procs, proc{cl.Node(a).PID(), cl.Node(a).Dir(), a})
		}
	})
	// The subtest's cleanup stopped every node and freed its ports.
	for _, p := range procs {
		if ours(p.pid, p.dir) {
			t.Errorf("node %s (pid %d) still running after cleanup", p.addr, p.pid)
		}
		_, port, _ := net.SplitHostPort(p.addr)
		n, _ := strconv.Atoi(port)
		if !portFree(n) || !portFree(n+busPortOffset) {
			t.Errorf("port %d or its bus port still taken after cleanup", n)
		}
	}
}

func TestParseClusterNodes(t *testing.T) {
	t.Parallel()
	text := "07c3 127.0.0.1:30004@40004,host1 slave e7d1 0 1426238317239 4 connected\n" +
		"67ed 127.0.0.1:30002@40002 master - 0 1426238316232 2 connected 5461-10922 [93-<-292f]\n" +
		"292f 127.0.0.1:30003@40003 myself,master - 0 0 3 connected 10923-16383 7\n" +
		"e7d1 127.0.0.1:30001@40001 master,fail - 0 1426238317741 1 disconnected\n"
	view := parseClusterNodes(text)
	if len(view) != 4 {
		t.Fatalf("parsed %d entries, want 4", len(view))
	}
	if e := view[0]; e.addr != "127.0.0.1:30004" || !e.has("slave") || e.masterID != "e7d1" || len(e.slots) != 0 {
		t.Errorf("replica entry: %+v", e)
	}
	if e := view[1]; !slices.Equal(e.slots, [][2]int{{5461, 10922}}) {
		t.Errorf("migrating slot not skipped: %+v", e)
	}
	if e := ownerOf(view, 7); e == nil || e.addr != "127.0.0.1:30003" {
		t.Errorf("ownerOf(7) = %+v", e)
	}
	if e := ownerOf(view, 0); e != nil {
		t.Errorf("ownerOf(0) = %+v, want nil", e)
	}
	if !view[3].has("fail") || view[3].has("myself") {
		t.Errorf("flags: %+v", view[3])
	}
}

func TestRESPErrorReply(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	_, err := command(srv.Addr(), "NOSUCHCOMMAND")
	var re redis.Error
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "NOSUCHCOMMAND") {
		t.Fatalf("error reply: %v", err)
	}
	if err := expectOK(srv.Addr(), "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	r, err := commands(srv.Addr(), []string{"GET", "k"}, []string{"GET", "nope"}, []string{"INCR", "n"}, []string{"MGET", "k", "nope"})
	if err != nil {
		t.Fatal(err)
	}
	if r[0] != "v" || r[1] != nil || r[2] != int64(1) || !slices.Equal(r[3].([]any), []any{"v", nil}) {
		t.Fatalf("replies = %#v", r)
	}
}
