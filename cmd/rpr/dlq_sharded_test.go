package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestDlqShardedService: the dead letters of a 3-shard service, from two
// lanes, through the command line: listed with their "k/id" ids and
// lanes, shown, dropped and replayed by those ids; a replay of letters
// whose lane has no live server any more says they went to the default
// lane.
func TestDlqShardedService(t *testing.T) {
	w := newMailWorld(t)
	w.serve("")
	stopV2 := w.serve("v2")
	lanes := map[string]string{}
	for i := range 9 {
		// Keyed requests go to the shard their key hashes to: these nine
		// keys put three letters in each shard, every run.
		key := tunnel.WithIdempotencyKey(fmt.Sprint("letter-", i))
		value, lane := fmt.Sprint("m", i), tunnel.DefaultLane
		if i%4 == 0 {
			lane = "v2"
			lanes[w.send(value, key, tunnel.WithLane("v2"))] = lane
		} else {
			lanes[w.send(value, key)] = lane
		}
	}
	dlq := serviceOf(w.rdb, mailSvc).DeadLetters()
	w.waitFor("9 dead letters", func() bool { n, _ := dlq.Len(context.Background()); return n == 9 })

	run := func(stdin, verb string, args ...string) rprRun {
		t.Helper()
		return runCLI(t, stdin, append([]string{"dlq", verb, "--redis", w.rs.URL()}, args...)...)
	}
	res := run("", "ls", mailSvc)
	if res.code != 0 || !strings.Contains(res.stdout, "9 dead letters of "+mailSvc+"\n") {
		t.Fatalf("ls:\n%s", res)
	}
	t.Logf("rpr dlq ls %s:\n%s", mailSvc, res.stdout)
	header, rows := dlqTable(t, res.stdout)
	if want := "ENTRY REQUEST METHOD LANE CODE ATTEMPTS AGE REASON"; strings.Join(header, " ") != want {
		t.Fatalf("header %q; want %q (a LANE column: some letters are not of the default lane)", header, want)
	}
	if len(rows) != 9 {
		t.Fatalf("%d rows, want 9:\n%s", len(rows), res.stdout)
	}
	byShard := map[string][]string{} // "0", "1", "2" -> entry ids
	for entry, f := range rows {
		shard := "0"
		if s, _, ok := strings.Cut(entry, "/"); ok {
			shard = s
		}
		byShard[shard] = append(byShard[shard], entry)
		if f[3] != lanes[f[1]] {
			t.Errorf("row %q: lane %s; want %s", f, f[3], lanes[f[1]])
		}
	}
	if len(byShard["0"]) == 0 || len(byShard["1"]) == 0 || len(byShard["2"]) == 0 || len(byShard) != 3 {
		t.Fatalf("entries by shard %v; want entries of shards 0 (plain ids), 1 and 2 (k/id)", byShard)
	}

	// show takes a "2/id"; JSON says shard and lane.
	inShard2 := byShard["2"][0]
	res = run("", "show", mailSvc, inShard2)
	for _, want := range []string{
		"entry      " + inShard2 + " in rpr:v1:{" + mailSvc + "#2}:dlq\n",
		"shard      2 of 3\n",
		"lane       " + lanes[rows[inShard2][1]] + "\n",
	} {
		if res.code != 0 || !strings.Contains(res.stdout, want) {
			t.Errorf("show %s: lacks %q:\n%s", inShard2, want, res)
		}
	}
	res = run("", "ls", mailSvc, "-o", "json")
	var doc struct {
		Streams     []string `json:"dlq_streams"`
		DeadLetters []struct {
			EntryID string `json:"entry_id"`
			Shard   int    `json:"shard"`
			Lane    string `json:"lane"`
		} `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &doc); err != nil || len(doc.Streams) != 3 || len(doc.DeadLetters) != 9 {
		t.Fatalf("ls -o json: %v, %+v\n%s", err, doc, res)
	}
	for _, dl := range doc.DeadLetters {
		if (dl.Shard == 0) == strings.Contains(dl.EntryID, "/") || dl.Lane == "" {
			t.Errorf("JSON letter %+v", dl)
		}
	}

	// Malformed ids are refused before anything happens.
	for _, id := range []string{"x/1-0", "2/", "99/1-0"} {
		if res := run("", "show", mailSvc, id); res.code != 2 || !strings.Contains(res.stderr, "2/1764434400123-0") {
			t.Errorf("show %s: want exit 2 naming the id forms:\n%s", id, res)
		}
	}

	// drop one letter of shard 1 by its id.
	inShard1 := byShard["1"][0]
	if res := run("", "drop", mailSvc, inShard1, "--yes"); res.code != 0 || res.stdout != "dropped 1 dead letter of "+mailSvc+"\n" {
		t.Fatalf("drop %s:\n%s", inShard1, res)
	}
	if _, err := dlq.Get(context.Background(), inShard1); !errors.Is(err, admin.ErrNoDeadLetter) {
		t.Fatalf("after drop, Get(%s): %v", inShard1, err)
	}
	if res := run("", "show", mailSvc, inShard1); res.code != 1 {
		t.Errorf("show of a dropped letter: want exit 1:\n%s", res)
	}

	// v2's servers are gone; the fix is deployed; replay everything: lane
	// v2's letters go to the default lane, and the summary says so.
	stopV2()
	w.fixed.Store(true)
	left := 0
	v2Left := 0
	for entry, f := range rows {
		if entry == inShard1 {
			continue
		}
		left++
		if f[3] == "v2" {
			v2Left++
		}
	}
	res = run("", "replay", mailSvc, "--all")
	if res.code != 0 || !strings.Contains(res.stdout, fmt.Sprintf("replayed %d of %d dead letters of %s\n", left, left, mailSvc)) ||
		!strings.Contains(res.stdout, fmt.Sprintf("note: %s of lane v2 went to the default lane instead: lane v2 has no live server\n", count(v2Left, "dead letter"))) {
		t.Fatalf("replay --all (%d letters, %d of lane v2):\n%s", left, v2Left, res)
	}
	w.waitFor("the replayed letters to run", func() bool { return len(w.delivered()) == left })
	for value, lane := range w.delivered() {
		if lane != tunnel.DefaultLane {
			t.Errorf("%s ran in lane %s; want the default lane", value, lane)
		}
	}
	if n, _ := dlq.Len(context.Background()); n != 0 {
		t.Errorf("%d dead letters left", n)
	}
	want := mailSvc + " has no dead letters (the 3 streams rpr:v1:{" + mailSvc + "}:dlq … rpr:v1:{" + mailSvc + "#2}:dlq are empty)\n"
	if res := run("", "ls", mailSvc); res.code != 0 || res.stdout != want {
		t.Errorf("ls of the empty DLQ:\n%s\nwant stdout %q", res, want)
	}
}
