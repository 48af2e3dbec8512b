package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/rprtunnel/rpr/bench/internal/compare"
)

// TestRunPrintsTable runs a tiny comparison end to end against real
// redis-servers and checks the table has a row per system, the ratios,
// and no warning (every goroutine of both systems stopped).
func TestRunPrintsTable(t *testing.T) {
	if os.Getenv("RPR_REDIS_SERVER") == "" {
		if _, err := exec.LookPath("redis-server"); err != nil {
			t.Skip("redis-server not on PATH (nor $RPR_REDIS_SERVER)")
		}
	}
	var out, log bytes.Buffer
	err := run(context.Background(), &out, compare.AsyncOptions{Tasks: 300, Producers: 4, Concurrency: 16, Warmup: 10, Log: &log})
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	rows := map[string]bool{}
	for l := range strings.SplitSeq(out.String(), "\n") {
		if f := strings.Fields(l); len(f) == 8 {
			rows[f[0]] = true
		}
	}
	if !rows["rpr"] || !rows["asynq"] || !rows["rpr/asynq"] || strings.Contains(out.String(), "warning:") {
		t.Fatalf("want a row for rpr, asynq and rpr/asynq and no warnings:\n%s\nlog:\n%s", out.String(), log.String())
	}
}
