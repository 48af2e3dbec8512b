package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/rprtunnel/rpr/bench/internal/compare"
)

// TestRunPrintsTable runs a small comparison end to end (it needs
// redis-server on PATH) and checks the table has a row per level.
func TestRunPrintsTable(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), &out, io.Discard, config{calls: 200, levels: []int{1, 4}, payload: 16, warmup: 10})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	var rows int
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 0 && (f[0] == "1" || f[0] == "4") {
			rows++
		}
	}
	if rows != 2 || !strings.Contains(out.String(), "rpr/gRPC calls/s") || strings.Contains(out.String(), "warning:") {
		t.Fatalf("want a header, two rows and no warnings:\n%s", out.String())
	}
}

// BenchmarkEcho is the comparison as a Go benchmark: b.N echo calls of 128
// bytes per system and concurrency, reported as calls/s, p50/p99 and CPU
// per call.
//
//	go test -run '^$' -bench Echo -benchtime 20000x ./grpccompare
func BenchmarkEcho(b *testing.B) {
	rs, err := compare.StartRedis("")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rs.Stop)
	ctx := context.Background()
	payload := bytes.Repeat([]byte("x"), 128)
	systems := []struct {
		name  string
		start func() (compare.Echoer, error)
	}{
		{"rpr", func() (compare.Echoer, error) { return compare.StartRPR(ctx, rs.URL()) }},
		{"grpc", func() (compare.Echoer, error) { return compare.StartGRPC(ctx) }},
	}
	for _, concurrency := range []int{1, 16, 128} {
		for _, sys := range systems {
			b.Run(fmt.Sprintf("%s/concurrency=%d", sys.name, concurrency), func(b *testing.B) {
				e, err := sys.start()
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				r, err := compare.Measure(ctx, e, payload, concurrency, b.N, min(b.N, 1000))
				if err != nil {
					b.Fatal(err)
				}
				if r.Errors > 0 {
					b.Fatalf("%d of %d calls failed, first: %v", r.Errors, r.Calls, r.FirstErr)
				}
				b.ReportMetric(r.CallsPerSecond(), "calls/s")
				b.ReportMetric(float64(r.P50.Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(r.P99.Microseconds())/1000, "p99-ms")
				b.ReportMetric(r.PerCall(r.ProcessCPU), "process-cpu-us/call")
				if r.RedisCPU >= 0 {
					b.ReportMetric(r.PerCall(r.RedisCPU), "redis-cpu-us/call")
					b.ReportMetric(float64(r.RedisCommands)/float64(r.Calls), "redis-cmds/call")
				}
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
