package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestDlqLsSaysWhenFull: with the dead-letter stream at its servers' cap,
// `rpr dlq ls` says so, what it means and what to do, and its JSON has
// the cap and the full shards; the letter held back lands once the
// operator drops the others.
func TestDlqLsSaysWhenFull(t *testing.T) {
	w := newJobsWorldCapped(t, 2)
	w.enqueue("Notify", "a")
	w.enqueue("Notify", "b")
	w.waitFor("two dead letters", func() bool { return w.dlqLen() == 2 })
	held := w.enqueue("Notify", "c")
	w.waitFor("ls to say the stream is full", func() bool {
		return strings.Contains(w.dlq("", "ls", jobsSvc).stdout, "FULL: its dead-letter stream is")
	})
	if res := runCLI(t, "", "trace", "--redis", w.rs.URL(), held); !strings.Contains(res.stdout, "held: its attempts are over") {
		t.Errorf("trace of the held request does not say it is held:\n%s", res)
	}
	res := w.dlq("", "ls", jobsSvc)
	for _, want := range []string{"at the cap of 2 letters", "nothing is dropped", "rpr dlq drop"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("ls of a full stream does not say %q:\n%s", want, res)
		}
	}
	var doc struct {
		Cap        int64 `json:"cap"`
		FullShards []int `json:"full_shards"`
	}
	if res := w.dlq("", "ls", jobsSvc, "-o", "json"); json.Unmarshal([]byte(res.stdout), &doc) != nil || doc.Cap != 2 || len(doc.FullShards) != 1 {
		t.Errorf("ls -o json of a full stream: %+v from\n%s", doc, res)
	}
	if res := w.dlq("yes\n", "drop", jobsSvc, "--code", "INVALID_ARGUMENT"); res.code != 0 {
		t.Fatalf("drop:\n%s", res)
	}
	w.waitFor("the held letter to land", func() bool { return w.dlqLen() == 1 })
	if res := w.dlq("", "ls", jobsSvc); strings.Contains(res.stdout, "FULL") {
		t.Errorf("ls below the cap still says FULL:\n%s", res)
	}
}
