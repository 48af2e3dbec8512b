package main

// What rpr bench reports, and its text form.

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// benchSummary is what rpr bench reports; -o json prints it as is. Figures
// that cannot be had are null in JSON and "n/a" in text.
type benchSummary struct {
	Mode          string `json:"mode"`
	Method        string `json:"method"`
	Redis         string `json:"redis"`
	EmbeddedRedis bool   `json:"embedded_redis"`
	// Server is "in-process" or "existing" (--no-server).
	Server            string  `json:"server"`
	ServerConcurrency int     `json:"server_concurrency,omitempty"`
	Concurrency       int     `json:"concurrency"`
	PayloadBytes      int     `json:"payload_bytes"`
	WarmupSeconds     float64 `json:"warmup_seconds"`
	// Seconds is the measured phase: from the first call until the last
	// answer (for async: the last enqueue).
	Seconds float64 `json:"seconds"`
	// StoppedBy is "duration", "requests" or "interrupt".
	StoppedBy string `json:"stopped_by"`
	Calls     int64  `json:"calls"`
	OK        int64  `json:"ok"`
	// Errors counts failed calls by status code.
	Errors         map[string]int64 `json:"errors"`
	CallsPerSecond float64          `json:"calls_per_second"`
	// LatencyOf says what Latency measures: "call" (unary: until the
	// answer) or "enqueue" (async: until the request is in Redis).
	LatencyOf string       `json:"latency_of"`
	Latency   benchLatency `json:"latency_ms"`
	// EndToEnd is set for async runs.
	EndToEnd *benchEndToEnd `json:"end_to_end,omitempty"`
	// RedisCommandsPerCall: commands Redis executed (INFO commandstats,
	// INFO excluded) per call; on the embedded Redis its command counter.
	RedisCommandsPerCall *float64 `json:"redis_commands_per_call"`
	// RedisCPUMicrosPerCall: Redis's used_cpu_sys+used_cpu_user per call;
	// null for the embedded Redis, which runs inside this process.
	RedisCPUMicrosPerCall *float64 `json:"redis_cpu_us_per_call"`
	// ProcessCPUMicrosPerCall: this process's user+system CPU per call
	// (client, and the server unless --no-server).
	ProcessCPUMicrosPerCall float64 `json:"process_cpu_us_per_call"`
	// AllocsPerCall: heap allocations of this process per call.
	AllocsPerCall float64  `json:"allocs_per_call"`
	Notes         []string `json:"notes,omitempty"`
}

// benchLatency holds latency quantiles in milliseconds, from a histogram
// with under 2% relative error.
type benchLatency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// benchEndToEnd is how long an async run took until every request
// enqueued in it had been processed.
type benchEndToEnd struct {
	// Enqueued is the requests enqueued successfully in the measured phase.
	Enqueued int64 `json:"enqueued"`
	// Processed is how many of them the in-process server processed; null
	// with --no-server (the queue is watched instead).
	Processed *int64 `json:"processed"`
	// Complete reports whether all were processed before bench gave up
	// waiting (after 2 minutes, or at Ctrl-C).
	Complete bool `json:"complete"`
	// Seconds runs from the first enqueue until the last was processed;
	// PerSecond is Enqueued over it. Both null when not Complete.
	Seconds   *float64 `json:"seconds"`
	PerSecond *float64 `json:"per_second"`
}

func (s *benchSummary) writeText(w io.Writer) {
	fmt.Fprintf(w, "rpr bench: %s %s via %s\n", s.Mode, s.Method, s.Redis)
	server := "in-process server (" + strconv.Itoa(s.ServerConcurrency) + " handlers)"
	if s.Server == "existing" {
		server = "existing servers"
	}
	fmt.Fprintf(w, "  %s, %d callers, %d B payload, %v warm-up; measured %.2fs, stopped by %s\n\n",
		server, s.Concurrency, s.PayloadBytes, time.Duration(s.WarmupSeconds*float64(time.Second)), s.Seconds, s.StoppedBy)
	row := func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-17s %s\n", label, fmt.Sprintf(format, args...))
	}
	row("calls", "%s", benchGroup(s.Calls))
	row("errors", "%s", s.errorText())
	row("calls/s", "%s", benchGroup(int64(math.Round(s.CallsPerSecond))))
	l := s.Latency
	label := "latency"
	if s.LatencyOf == "enqueue" {
		label = "enqueue latency"
	}
	row(label, "p50 %s ms   p90 %s ms   p99 %s ms   p99.9 %s ms   (max %s ms)",
		benchMs(l.P50), benchMs(l.P90), benchMs(l.P99), benchMs(l.P999), benchMs(l.Max))
	if e := s.EndToEnd; e != nil {
		if e.Complete {
			row("end to end", "%s processed %.2fs after the first enqueue (%s/s)", benchGroup(e.Enqueued), *e.Seconds, benchGroup(int64(math.Round(*e.PerSecond))))
		} else if e.Processed != nil {
			row("end to end", "n/a: %s of %s processed when bench stopped waiting", benchGroup(*e.Processed), benchGroup(e.Enqueued))
		} else {
			row("end to end", "n/a: the queue was not empty when bench stopped waiting")
		}
	}
	row("redis commands", "%s per call", benchPerCall(s.RedisCommandsPerCall, 2))
	who := "client"
	if s.Server == "in-process" {
		who = "client + server"
	}
	redisCPU := "n/a (embedded: runs in this process)"
	if s.RedisCPUMicrosPerCall != nil {
		redisCPU = benchPerCall(s.RedisCPUMicrosPerCall, 1) + " µs"
	}
	row("cpu per call", "redis %s   rpr process %s µs (%s)", redisCPU,
		strconv.FormatFloat(s.ProcessCPUMicrosPerCall, 'f', 1, 64), who)
	row("allocs per call", "%s (%s)", strconv.FormatFloat(s.AllocsPerCall, 'f', 1, 64), who)
	for _, n := range s.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// errorText is "0", or the count with the codes, most frequent first.
func (s *benchSummary) errorText() string {
	var total int64
	codes := make([]string, 0, len(s.Errors))
	for code, n := range s.Errors {
		total += n
		codes = append(codes, code)
	}
	if total == 0 {
		return "0"
	}
	slices.SortFunc(codes, func(a, b string) int {
		if s.Errors[a] != s.Errors[b] {
			return int(s.Errors[b] - s.Errors[a])
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(codes))
	for i, code := range codes {
		parts[i] = code + " " + benchGroup(s.Errors[code])
	}
	return benchGroup(total) + " (" + strings.Join(parts, ", ") + ")"
}

// benchPerCall formats an optional figure, "n/a" when there is none.
func benchPerCall(v *float64, decimals int) string {
	if v == nil {
		return "n/a"
	}
	return strconv.FormatFloat(*v, 'f', decimals, 64)
}

// benchMs formats milliseconds with about three significant digits.
func benchMs(v float64) string {
	decimals := 0
	switch {
	case v < 1:
		decimals = 3
	case v < 10:
		decimals = 2
	case v < 100:
		decimals = 1
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// benchGroup writes n with thousands separators: 1234567 -> 1,234,567.
func benchGroup(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
