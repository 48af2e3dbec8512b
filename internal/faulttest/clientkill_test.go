package faulttest

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/tunnel"
)

// TestKillClientMidCall SIGKILLs a client process while its call runs on a
// server with a single handler slot. The handler runs to its end, the
// response goes to the dead client's stream (which keeps its expiry and is
// read by nobody) or is dropped, the request is acknowledged, and the
// server goes on serving and shuts down cleanly.
func TestKillClientMidCall(t *testing.T) {
	w := newWorld(t)
	servers := startServers(t, w.redis.URL(), serverConfig{worker: "w1", concurrency: 1, lease: time.Second})
	const victimID = "victim"
	victim := startClientProc(t, w.redis.URL(), victimID, "2s", 30*time.Second)
	victim.waitMarker(markerCalling, 60*time.Second)

	var rid string
	waitUntil(t, 20*time.Second, "the victim's call to start", func() bool {
		for id := range w.execs() {
			rid = id
		}
		return rid != ""
	})
	victim.Kill()
	if strings.Contains(victim.out.String(), "result ") {
		t.Fatalf("the victim finished its call before it was killed:\n%s", victim.out.String())
	}

	waitUntil(t, 20*time.Second, "the orphaned handler to end", func() bool {
		return len(w.runs().finished[rid]) > 0
	})
	if ev := w.runs(); !slices.Equal(ev.started[rid], []string{"w1"}) || !slices.Equal(ev.finished[rid], []string{"w1"}) {
		t.Errorf("request %s: started on %v, ended on %v; want one run on w1", rid, ev.started[rid], ev.finished[rid])
	}
	w.waitDrained(20 * time.Second)

	// The dead client's response stream: gone, or still there with its
	// expiry and the response unread.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := responseStream(victimID)
	if n, err := w.rdb.Exists(ctx, key).Result(); err != nil {
		t.Fatal(err)
	} else if n == 0 {
		t.Logf("%s is gone", key)
	} else {
		pttl, err := w.rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if pttl <= 0 || pttl > time.Minute {
			t.Errorf("%s has TTL %v, want an expiry within a minute (it must not outlive its client)", key, pttl)
		}
		groups, err := w.rdb.XInfoGroups(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		entries, err := w.rdb.XRange(ctx, key, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range entries {
			s, _ := e.Values["e"].(string)
			if decodeMap(t, s)["id"] != rid {
				continue
			}
			found = true
			for _, g := range groups {
				if !idLess(g.LastDeliveredID, e.ID) {
					t.Errorf("group %q of %s read the dead client's response %s", g.Name, key, e.ID)
				}
			}
		}
		t.Logf("%s: TTL %v, %d entries, response written: %v", key, pttl.Round(time.Second), len(entries), found)
	}
	// A unary call leaves no state (the fast path): its entry was
	// acknowledged and deleted together with the answer.
	if n := w.rdb.XLen(ctx, "rpr:v1:{"+workService+"}:req").Val(); n != 0 {
		t.Errorf("request stream holds %d entries after the server answered, want 0", n)
	}

	// The server's only handler slot is free: calls go through one by one.
	c := w.newClient(tunnel.ClientOptions{})
	var outs []outcome
	for range 5 {
		outs = append(outs, c.call(writeMethod, "10ms", 10*time.Second))
	}
	w.waitDrained(20 * time.Second)
	execs := w.execs()
	if execs[rid] != 1 {
		t.Errorf("the victim's request ran %d times, want 1", execs[rid])
	}
	others := maps.Clone(execs)
	delete(others, rid)
	checkOutcomes(t, outs, others, tunnel.OK)

	if servers[0].Exited() {
		t.Fatalf("the server exited: %v", servers[0].err)
	}
	if err := servers[0].Term(20 * time.Second); err != nil {
		t.Errorf("server shutdown after SIGTERM: %v", err)
	}
}
