package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/internal/redistest"
)

const limitsSvc = "examples.orders.v1.Orders"

func TestLimitsSetLsRm(t *testing.T) {
	rs := redistest.Start(t)
	url := rs.URL()

	out, code := runRPR(t, "limits", "ls", "--redis", url, limitsSvc)
	if code != 1 || !strings.Contains(out, "unknown service "+limitsSvc) {
		t.Fatalf("ls of no rules of a service Redis does not know: exit %d, output %q", code, out)
	}
	heartbeat(t, rs, limitsSvc)
	out, code = runRPR(t, "limits", "ls", "--redis", url, limitsSvc)
	if code != 0 || !strings.Contains(out, "has no rate limits") || !strings.Contains(out, "rpr limits set "+limitsSvc) {
		t.Fatalf("ls of no rules: exit %d, output %q", code, out)
	}

	out, code = runRPR(t, "limits", "set", "--redis", url, limitsSvc, "free", "--tier", "free", "--limit", "10", "--window", "1s")
	if code != 0 || !strings.Contains(out, "added") || !strings.Contains(out, "10 calls per 1s") {
		t.Fatalf("set free: exit %d, output %q", code, out)
	}
	out, code = runRPR(t, "limits", "set", "--redis", url, limitsSvc, "vip-search", "--method", "Search", "--tier", "vip",
		"--limit", "1000", "--window", "1m", "--algorithm", "gcra", "--burst", "100")
	if code != 0 {
		t.Fatalf("set vip-search: exit %d, output %q", code, out)
	}
	out, code = runRPR(t, "limits", "set", "--redis", url, limitsSvc, "free", "--tier", "free", "--limit", "20", "--window", "1s")
	if code != 0 || !strings.Contains(out, "replaced (was: 10 calls per 1s") {
		t.Fatalf("replace free: exit %d, output %q", code, out)
	}

	// What the CLI stored is what clients read.
	rules, invalid, err := serviceOf(rs.Client(t), limitsSvc).Limits().List(context.Background())
	if err != nil || len(invalid) != 0 || len(rules) != 2 {
		t.Fatalf("ListLimits: %+v, %+v, %v", rules, invalid, err)
	}
	want := admin.LimitRule{Name: "vip-search", Method: limitsSvc + "/Search", Tier: "vip", Limit: 1000, Window: time.Minute, Algorithm: "gcra", Burst: 100}
	if rules[1] != want {
		t.Errorf("stored %+v, want %+v", rules[1], want)
	}

	out, code = runRPR(t, "limits", "ls", "--redis", url, limitsSvc)
	if code != 0 {
		t.Fatalf("ls: exit %d, output %q", code, out)
	}
	for _, line := range []string{
		"RULE        METHOD                            TIER  LIMIT  WINDOW  ALGORITHM  BURST",
		"free        *                                 free  20     1s      log        -",
		"vip-search  examples.orders.v1.Orders/Search  vip   1000   1m0s    gcra       100",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("ls lacks %q:\n%s", line, out)
		}
	}

	rdb := rs.Client(t)
	if err := rdb.HSet(context.Background(), serviceOf(rdb, limitsSvc).Limits().Key(), "broken", "{nope").Err(); err != nil {
		t.Fatal(err)
	}
	out, code = runRPR(t, "limits", "ls", "--redis", url, limitsSvc, "-o", "json")
	if code != 0 {
		t.Fatalf("ls -o json: exit %d, output %q", code, out)
	}
	var doc struct {
		Service string `json:"service"`
		Key     string `json:"key"`
		Rules   []struct {
			Name, Method, Tier, Window, Algorithm string
			Limit, Burst                          int64
		} `json:"rules"`
		Invalid []struct{ Name, Value, Error string } `json:"invalid"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("ls -o json is not JSON: %v\n%s", err, out)
	}
	if doc.Service != limitsSvc || doc.Key != "rpr:v1:{"+limitsSvc+"}:limits" || len(doc.Rules) != 2 ||
		doc.Rules[1].Window != "1m0s" || doc.Rules[1].Burst != 100 || len(doc.Invalid) != 1 || doc.Invalid[0].Name != "broken" {
		t.Errorf("ls -o json: %+v", doc)
	}
	if out, _ = runRPR(t, "limits", "ls", "--redis", url, limitsSvc); !strings.Contains(out, "invalid, ignored by clients: broken") {
		t.Errorf("ls does not show the invalid rule:\n%s", out)
	}

	out, code = runRPR(t, "limits", "rm", "--redis", url, limitsSvc, "free")
	if code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("rm: exit %d, output %q", code, out)
	}
	out, code = runRPR(t, "limits", "rm", "--redis", url, limitsSvc, "free")
	if code != 1 || !strings.Contains(out, `no rate-limit rule "free"`) || !strings.Contains(out, "broken, vip-search") {
		t.Fatalf("rm of a missing rule: exit %d, output %q; want 1 listing the rules", code, out)
	}
}

func TestLimitsSetRejectsBadInput(t *testing.T) {
	rs := redistest.Start(t)
	base := []string{"limits", "set", "--redis", rs.URL(), limitsSvc, "r1"}
	for _, tc := range []struct {
		args []string
		want []string // in the message
	}{
		{[]string{"--window", "1s"}, []string{"--limit is required", "--limit 100"}},
		{[]string{"--limit", "10"}, []string{"--window is required", "--window 1s"}},
		{[]string{"--limit", "ten", "--window", "1s"}, []string{"--limit", "e.g. --limit 100"}},
		{[]string{"--limit", "0", "--window", "1s"}, []string{"--limit", "e.g. --limit 100"}},
		{[]string{"--limit", "10", "--window", "soon"}, []string{"--window", "e.g. --window 1s"}},
		{[]string{"--limit", "10", "--window", "48h"}, []string{"--window 48h0m0s", "24h", "e.g. --window 1s"}},
		{[]string{"--limit", "10", "--window", "1s", "--algorithm", "leaky"}, []string{"--algorithm \"leaky\"", "e.g. --algorithm gcra"}},
		{[]string{"--limit", "10", "--window", "1s", "--burst", "5"}, []string{"--burst 5", "gcra"}},
		{[]string{"--limit", "10", "--window", "1s", "--algorithm", "gcra", "--burst", "11"}, []string{"--burst 11", "e.g. --burst 10"}},
		{[]string{"--limit", "10", "--window", "1s", "--method", "other.v1.Svc/Get"}, []string{"--method other.v1.Svc/Get", "another service", "e.g. --method " + limitsSvc + "/Get"}},
		{[]string{"--limit", "10", "--window", "1s", "--tier", "v i p"}, []string{"--tier v i p", "e.g. --tier vip"}},
		{[]string{"--limit", "200000", "--window", "1s"}, []string{"--limit 200000", "gcra"}},
		{[]string{"--limit", "10", "--window", "1s", "--bogus"}, []string{"unknown flag: --bogus"}},
	} {
		out, code := runRPR(t, append(append([]string{}, base...), tc.args...)...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2; output %q", tc.args, code, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output %q lacks %q", tc.args, out, w)
			}
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"limits", "set", "--redis", rs.URL(), limitsSvc, "bad:name", "--limit", "1", "--window", "1s"}, `rule name "bad:name"`},
		{[]string{"limits", "set", "--redis", rs.URL(), limitsSvc + "/Get", "r", "--limit", "1", "--window", "1s"}, "--method Get"},
		{[]string{"limits", "set", "--redis", rs.URL(), limitsSvc}, "usage: rpr limits set SERVICE RULE"},
		{[]string{"limits", "ls", "--redis", rs.URL(), limitsSvc, "-o", "yaml"}, "-o json"},
		{[]string{"limits", "lst"}, "did you mean ls"},
	} {
		if out, code := runRPR(t, tc.args...); code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, output %q; want 2 and %q", tc.args, code, out, tc.want)
		}
	}
	rules, _, err := serviceOf(rs.Client(t), limitsSvc).Limits().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 0 {
		t.Errorf("rejected input stored rules: %+v", rules)
	}
}
