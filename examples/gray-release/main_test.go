package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/internal/redistest"
)

// TestWalkthrough runs the example, with short steps, against a real
// redis-server and against the embedded one (its default), and checks
// each step's calls went where its routes say, and that none failed.
func TestWalkthrough(t *testing.T) {
	rs := redistest.Start(t)
	for name, url := range map[string]string{"real redis": rs.URL(), "embedded": ""} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			steps, err := run(ctx, &out, config{redisURL: url, step: 2 * time.Second, rate: 200})
			if err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			if len(steps) != 5 {
				t.Fatalf("%d steps, want 5\n%s", len(steps), out.String())
			}
			for _, s := range steps {
				if s.total.errors > 0 {
					t.Errorf("step %q: %d calls failed", s.name, s.total.errors)
				}
			}
			check := func(i int, what string, ok bool) {
				t.Helper()
				if !ok {
					t.Errorf("step %q: want %s; got all %v, canary %v", steps[i].name, what, steps[i].total.all, steps[i].total.canary)
				}
			}
			all := func(i int, lane string) int { return steps[i].total.all[lane] }
			canary := func(i int, lane string) int { return steps[i].total.canary[lane] }
			check(0, "every call in v1", all(0, "v1") > 0 && all(0, "v2") == 0)
			check(1, "calls in both lanes", all(1, "v1") > 0 && all(1, "v2") > 0 && all(1, "v1") > all(1, "v2"))
			check(2, "every canary call in v2, the others in both", canary(2, "v1") == 0 && canary(2, "v2") > 0 && all(2, "v1") > 0)
			check(3, "every call in v2", all(3, "v2") > 0 && all(3, "v1") == 0)
			check(4, "every call in v1 again", all(4, "v1") > 0 && all(4, "v2") == 0)
			for _, want := range []string{
				"$ rpr routes set --redis redis://",
				" examples.greeter.v1.Greeter/* 'x-canary=true => v2' v1:90,v2:10\n",
				"$ rpr routes drain --redis redis://",
				" examples.greeter.v1.Greeter v2 --to v1\n",
				"0 failed",
			} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}
