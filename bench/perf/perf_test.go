package main

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/rprtunnel/rpr/bench/internal/compare"
)

// TestMain lets the test binary serve as the harness's server child: the
// harness starts its own executable again, here this binary.
func TestMain(m *testing.M) {
	if ran, code := compare.RunChildIfAsked(); ran {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestSmoke runs every section with tiny counts against a real
// redis-server and checks that the table has each goal's rows, with
// figures that were measured (no NaN where a figure must be).
func TestSmoke(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("RPR_REDIS_SERVER") == "" {
		t.Skip("redis-server is not on PATH (nor named by $RPR_REDIS_SERVER)")
	}
	s, err := parseFlags([]string{"-quick", "-calls", "200", "-calls-64k", "10", "-calls-1m", "3",
		"-idle-window", "300ms", "-settle", "100ms"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	var log, errs bytes.Buffer
	rows, failed := measureAll(t.Context(), s, &log, &errs)
	if failed {
		t.Fatalf("a section failed: %s\nlog:\n%s", errs.String(), log.String())
	}
	goals := map[int]int{}
	floorRows := 0
	for _, r := range rows {
		goals[r.Goal]++
		if r.Goal == 1 && strings.Contains(r.Figure, "plain Streams RPC") {
			floorRows++
		}
		if math.IsNaN(r.RPR) || math.IsInf(r.RPR, 0) || r.RPR < 0 {
			t.Errorf("goal %d %q: rpr figure %v", r.Goal, r.Figure, r.RPR)
		}
		if r.BaselineOf != "" && (math.IsNaN(r.Baseline) || r.Baseline <= 0) {
			t.Errorf("goal %d %q: baseline (%s) %v", r.Goal, r.Figure, r.BaselineOf, r.Baseline)
		}
	}
	for _, g := range []int{1, 2, 3, 4, 5, 6} {
		if goals[g] == 0 {
			t.Errorf("no row for goal %d", g)
		}
	}
	if floorRows != 6 {
		t.Errorf("goal 1 has %d rows of the plain Streams RPC (its floors), want 6: each server's figure against gRPC-go's, rpr's against it, and rpr's Go and total CPU judged against the concurrent one", floorRows)
	}
	var table bytes.Buffer
	printTable(&table, rows)
	if !strings.HasPrefix(table.String(), "| goal | figure") || strings.Count(table.String(), "\n|") != len(rows)+1 {
		t.Errorf("table:\n%s", table.String())
	}
	if t.Failed() {
		t.Logf("log:\n%s", log.String())
	}
}

// TestTargets checks how a row is judged against each kind of target.
func TestTargets(t *testing.T) {
	for _, c := range []struct {
		row  compare.Row
		want string
	}{
		{compare.Row{RPR: 23, Baseline: math.NaN(), Target: compare.AtMost(23)}, "yes"},
		{compare.Row{RPR: 24, Baseline: math.NaN(), Target: compare.AtMost(23)}, "no"},
		{compare.Row{RPR: 42, Baseline: 85, Target: compare.RatioAtMost(0.5)}, "yes"},
		{compare.Row{RPR: 43, Baseline: 85, Target: compare.RatioAtMost(0.5)}, "no"},
		{compare.Row{RPR: 5, Baseline: 1, Target: compare.RatioAtLeast(5)}, "yes"},
		{compare.Row{RPR: 4, Baseline: 1, Target: compare.RatioAtLeast(5)}, "no"},
		{compare.Row{RPR: 4, Baseline: math.NaN(), Target: compare.RatioAtMost(2)}, "no"},
		{compare.Row{RPR: 4, Baseline: 1, Target: compare.NoTarget}, "—"},
	} {
		if got := c.row.Met(); got != c.want {
			t.Errorf("%v %s against baseline %v: met %q, want %q", c.row.RPR, c.row.Target, c.row.Baseline, got, c.want)
		}
	}
}

// TestTally checks that the table counts the targets goals are judged by
// apart from those as issue 18 wrote them.
func TestTally(t *testing.T) {
	rows := []compare.Row{
		{Goal: 1, Figure: "judged, met", RPR: 1.1, Baseline: math.NaN(), Target: compare.AtMost(1.15)},
		{Goal: 1, Figure: "as written, not met", RPR: 0.7, Baseline: 1, Target: compare.RatioAtMost(0.59), AsWritten: true},
		{Goal: 3, Figure: "as written, met", RPR: 1.1, Baseline: 1, Target: compare.RatioAtMost(1.15), AsWritten: true},
		{Goal: 3, Figure: "judged, not met", RPR: 1.2, Baseline: 1, Target: compare.RatioAtMost(1.15)},
		{Goal: 3, Figure: "reported", RPR: 1.2, Baseline: 1, Target: compare.NoTarget},
	}
	var out bytes.Buffer
	printTable(&out, rows)
	for _, want := range []string{
		"| ratio ≤ 0.59 as written |",
		"\n1 of 2 targets met (",
		"as issue 18 wrote them, for goals judged against the plain Streams RPC of the same run: 1 of 2 met",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table has no %q:\n%s", want, out.String())
		}
	}
}

// TestFlags checks -only and -quick.
func TestFlags(t *testing.T) {
	s, err := parseFlags([]string{"-quick", "-calls", "300", "-only", "idle,unary"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if s.calls != 300 || s.runs != 1 || s.asyncRuns != 1 || s.calls1M != 20 || strings.Join(s.only, ",") != "idle,unary" {
		t.Errorf("settings %+v: want -calls 300 kept, -quick's runs, async runs and 1 MiB calls, -only as given", s)
	}
	if _, err := parseFlags([]string{"-only", "nosuch"}, os.Stderr); err == nil {
		t.Error("-only nosuch: no error")
	}
}
