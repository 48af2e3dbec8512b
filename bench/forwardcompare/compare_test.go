package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
)

// TestRunPrintsTable runs a small comparison end to end (it needs
// redis-server on PATH, and builds rpr from ../../cmd/rpr unless $RPR_BIN
// names one) and checks the table has a row per workload, level and
// system, and no warnings. gRPC rows through rpr may be skipped with a
// note while the passthrough is not there.
func TestRunPrintsTable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and two rpr processes")
	}
	var out bytes.Buffer
	err := run(context.Background(), &out, io.Discard, config{
		requests: 200, levels: []int{1, 4}, warmup: 10, size: 128, post: 1024, http: true, grpc: true, rprBin: os.Getenv("RPR_BIN"),
	})
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	rows := map[string]int{}
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		for _, w := range []string{"HTTP GET", "HTTP POST", "gRPC unary"} {
			if !strings.HasPrefix(l, w) {
				continue
			}
			rows[w]++
			// Only rpr's gRPC rows may be skipped, for a passthrough not
			// written yet.
			if strings.Contains(l, "skipped") && (w != "gRPC unary" || !strings.Contains(l, "rpr ingress")) {
				t.Errorf("skipped: %s", l)
			}
		}
	}
	for w, n := range map[string]int{"HTTP GET": 6, "HTTP POST": 6, "gRPC unary": 6} {
		if rows[w] != n {
			t.Errorf("%d %s rows, want %d (2 levels x 3 systems)", rows[w], w, n)
		}
	}
	if strings.Contains(text, "warning:") || !strings.Contains(text, "req/s ÷proxy") {
		t.Errorf("want a header and no warnings")
	}
	if t.Failed() {
		t.Log(text)
	}
}
