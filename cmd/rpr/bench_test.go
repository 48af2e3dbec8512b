package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/internal/redistest"
)

// runBenchCLI runs `rpr args...` in this process, with stdout and stderr
// apart (the summary goes to one, the progress line and warnings to the
// other), and returns them with the exit status.
func runBenchCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	var exit exitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.code
		errOut.WriteString(err.Error())
	default:
		code = 1
		errOut.WriteString(err.Error())
	}
	return out.String(), errOut.String(), code
}

// benchField returns the value column of the summary line labelled label.
func benchField(t *testing.T, summary, label string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(label) + `\s{2,}(.+)$`).FindStringSubmatch(summary)
	if m == nil {
		t.Fatalf("summary has no %q line:\n%s", label, summary)
	}
	return strings.TrimSpace(m[1])
}

// benchNumber parses the first number in s ("10.43 per call" -> 10.43).
func benchNumber(t *testing.T, what, s string) float64 {
	t.Helper()
	m := regexp.MustCompile(`-?[\d,]+(\.\d+)?`).FindString(s)
	v, err := strconv.ParseFloat(strings.ReplaceAll(m, ",", ""), 64)
	if m == "" || err != nil {
		t.Fatalf("%s: %q holds no number", what, s)
	}
	return v
}

// TestBenchAgainstRealRedis runs `rpr bench` in both modes against a real
// redis-server, in text and JSON, and checks that the summary is complete
// and consistent. It asserts no timings.
func TestBenchAgainstRealRedis(t *testing.T) {
	for _, mode := range []string{"unary", "async"} {
		t.Run(mode, func(t *testing.T) {
			rs := redistest.Start(t)
			args := []string{"bench", "--redis", rs.URL(), "--mode", mode, "--requests", "300", "--concurrency", "4", "--warmup", "100ms"}

			stdout, stderr, code := runBenchCLI(t, args...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			if got := benchField(t, stdout, "calls"); got != "300" {
				t.Errorf("calls = %q, want 300:\n%s", got, stdout)
			}
			if got := benchField(t, stdout, "errors"); got != "0" {
				t.Errorf("errors = %q, want 0:\n%s", got, stdout)
			}
			if v := benchNumber(t, "calls/s", benchField(t, stdout, "calls/s")); v <= 0 {
				t.Errorf("calls/s = %v, want > 0", v)
			}
			latency := "latency"
			if mode == "async" {
				latency = "enqueue latency"
			}
			for _, q := range []string{"p50 ", "p90 ", "p99 ", "p99.9 "} {
				if l := benchField(t, stdout, latency); !strings.Contains(l, q) {
					t.Errorf("%s line lacks %q: %q", latency, q, l)
				}
			}
			if v := benchNumber(t, "redis commands", benchField(t, stdout, "redis commands")); v <= 0 {
				t.Errorf("redis commands per call = %v, want > 0", v)
			}
			cpu := benchField(t, stdout, "cpu per call")
			if !regexp.MustCompile(`^redis [\d.]+ µs\s+rpr process [\d.]+ µs`).MatchString(cpu) {
				t.Errorf("cpu per call = %q, want a number for redis and for the process", cpu)
			}
			benchNumber(t, "allocs per call", benchField(t, stdout, "allocs per call"))
			if mode == "async" {
				if e2e := benchField(t, stdout, "end to end"); !strings.HasPrefix(e2e, "300 processed") {
					t.Errorf("end to end = %q, want all 300 processed", e2e)
				}
			}
			if !strings.Contains(stderr, "rpr bench: 300/300 calls") {
				t.Errorf("stderr lacks the closing progress line:\n%s", stderr)
			}

			stdout, stderr, code = runBenchCLI(t, append(args, "-o", "json")...)
			if code != 0 {
				t.Fatalf("-o json: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			var sum benchSummary
			if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
				t.Fatalf("-o json output does not parse: %v\n%s", err, stdout)
			}
			switch {
			case sum.Mode != mode || sum.Calls != 300 || sum.OK != 300 || len(sum.Errors) != 0:
				t.Errorf("json: mode %q, calls %d, ok %d, errors %v; want %s, 300, 300, none", sum.Mode, sum.Calls, sum.OK, sum.Errors, mode)
			case sum.StoppedBy != "requests" || sum.EmbeddedRedis || sum.Server != "in-process":
				t.Errorf("json: stopped_by %q, embedded %v, server %q", sum.StoppedBy, sum.EmbeddedRedis, sum.Server)
			case sum.RedisCommandsPerCall == nil || *sum.RedisCommandsPerCall <= 0:
				t.Errorf("json: redis_commands_per_call = %v, want > 0", sum.RedisCommandsPerCall)
			case sum.RedisCPUMicrosPerCall == nil:
				t.Errorf("json: redis_cpu_us_per_call is null against a real Redis")
			case sum.CallsPerSecond <= 0 || sum.Latency.P50 <= 0 || sum.Latency.P50 > sum.Latency.P99 || sum.Latency.P99 > sum.Latency.Max:
				t.Errorf("json: calls/s %v, latency %+v: want positive, ordered figures", sum.CallsPerSecond, sum.Latency)
			}
			if mode == "async" {
				e := sum.EndToEnd
				if e == nil || !e.Complete || e.Enqueued != 300 || e.Processed == nil || *e.Processed != 300 || e.Seconds == nil {
					t.Errorf("json: end_to_end = %+v, want 300 enqueued and processed", e)
				}
			} else if sum.EndToEnd != nil {
				t.Errorf("json: unary run has end_to_end %+v", sum.EndToEnd)
			}
		})
	}
}

// TestBenchEmbeddedRedisWarns checks that a run on the embedded Redis says
// its figures mean nothing and reports no Redis CPU.
func TestBenchEmbeddedRedisWarns(t *testing.T) {
	stdout, stderr, code := runBenchCLI(t, "bench", "--requests", "50", "--concurrency", "2", "--warmup", "0")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "NOT representative") {
		t.Errorf("stderr lacks the warning:\n%s", stderr)
	}
	if got := benchField(t, stdout, "calls"); got != "50" {
		t.Errorf("calls = %q, want 50", got)
	}
	if cpu := benchField(t, stdout, "cpu per call"); !strings.HasPrefix(cpu, "redis n/a") {
		t.Errorf("cpu per call = %q, want redis n/a", cpu)
	}
}

// TestBenchBadFlags checks that bad input is exit status 2 with a message
// naming the flag and showing an example, before anything connects.
func TestBenchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the message, besides "e.g."
	}{
		{[]string{"--concurrency", "0"}, "--concurrency"},
		{[]string{"--concurrency", "many"}, "--concurrency"},
		{[]string{"--duration", "-1s"}, "--duration"},
		{[]string{"--duration", "ten"}, "--duration"},
		{[]string{"--requests", "0"}, "--requests"},
		{[]string{"--payload", "0"}, "--payload"},
		{[]string{"--payload", "99999999"}, "--payload"},
		{[]string{"--mode", "stream"}, "--mode"},
		{[]string{"--warmup", "-1s"}, "--warmup"},
		{[]string{"-o", "xml"}, "-o"},
		{[]string{"--no-server"}, "--no-server"},
		{[]string{"--server-concurrency", "-1"}, "--server-concurrency"},
		{[]string{"--bogus"}, "--bogus"},
		{[]string{"extra-arg"}, "extra-arg"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := runBenchCLI(t, append([]string{"bench"}, tc.args...)...)
			if code != 2 {
				t.Fatalf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			if !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "e.g.") {
				t.Errorf("message %q should name %s and give an example (e.g. ...)", stderr, tc.want)
			}
		})
	}
}

// TestBenchHistogram checks the latency histogram's quantiles against
// exact ones.
func TestBenchHistogram(t *testing.T) {
	var h benchHistogram
	for i := int64(1); i <= 100000; i++ {
		h.record(time.Duration(i * 1000)) // 1µs .. 100ms
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := q * 100000 * 1000
		got := h.quantile(q)
		if got < exact*0.98 || got > exact*1.02 {
			t.Errorf("quantile(%v) = %v ns, want within 2%% of %v", q, got, exact)
		}
	}
	// The top quantile is the largest sample: not above it (quantile caps
	// there), and not below the bucket holding it.
	if h.max != 100*time.Millisecond {
		t.Errorf("max = %v, want the largest sample, 100ms", h.max)
	}
	if got := h.quantile(1); got > float64(h.max) || got < float64(h.max)*0.98 {
		t.Errorf("quantile(1) = %v ns, want within 2%% below the maximum %v", got, h.max)
	}
}
