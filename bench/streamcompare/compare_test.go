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
// redis-server on PATH) and checks the table has a row per workload and no
// warnings.
func TestRunPrintsTable(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), &out, io.Discard, config{messages: 500, streams: []int{1, 4}, rounds: 50, size: 1024})
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"server stream x1", "server stream x4", "bidi ping-pong x1", "rpr/gRPC msgs/s"} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in the table:\n%s", want, text)
		}
	}
	if strings.Contains(text, "warning:") {
		t.Errorf("warnings:\n%s", text)
	}
}

// BenchmarkServerStream receives b.N messages of 1 KiB over one server
// stream (and over 16), per system: messages/s, MB/s, and for rpr Redis
// commands per message.
//
//	go test -run '^$' -bench 'ServerStream|PingPong' -benchtime 100000x ./streamcompare
func BenchmarkServerStream(b *testing.B) {
	rs, err := compare.StartRedis("")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rs.Stop)
	ctx := context.Background()
	for _, streams := range []int{1, 16} {
		for _, sys := range streamSystems(ctx, rs.URL()) {
			b.Run(fmt.Sprintf("%s/streams=%d", sys.name, streams), func(b *testing.B) {
				s, err := sys.start()
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				r, err := compare.MeasureFeed(ctx, s, streams, max(b.N, streams), 1024)
				if err != nil {
					b.Fatal(err)
				}
				if r.Errors > 0 {
					b.Fatal(r.FirstErr)
				}
				b.ReportMetric(r.PerSecond(), "msgs/s")
				b.ReportMetric(r.MBPerSecond(), "MB/s")
				b.ReportMetric(r.PerMessage(r.ProcessCPU), "process-cpu-us/msg")
				if r.RedisCommands >= 0 {
					b.ReportMetric(r.CommandsPerMessage(), "redis-cmds/msg")
					b.ReportMetric(r.PerMessage(r.RedisCPU), "redis-cpu-us/msg")
				}
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// BenchmarkPingPong makes b.N round trips of 1 KiB on one bidirectional
// stream, per system: p50 and p99 of the round trip.
func BenchmarkPingPong(b *testing.B) {
	rs, err := compare.StartRedis("")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rs.Stop)
	ctx := context.Background()
	for _, sys := range streamSystems(ctx, rs.URL()) {
		b.Run(sys.name, func(b *testing.B) {
			s, err := sys.start()
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			r, err := compare.MeasurePingPong(ctx, s, b.N, 1024)
			if err != nil {
				b.Fatal(err)
			}
			if r.Errors > 0 {
				b.Fatal(r.FirstErr)
			}
			b.ReportMetric(float64(r.P50.Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(r.P99.Microseconds())/1000, "p99-ms")
			b.ReportMetric(r.PerSecond(), "rounds/s")
			if r.RedisCommands >= 0 {
				b.ReportMetric(r.CommandsPerMessage(), "redis-cmds/round")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

type streamSystem struct {
	name  string
	start func() (compare.Streamer, error)
}

func streamSystems(ctx context.Context, redisURL string) []streamSystem {
	return []streamSystem{
		{"rpr", func() (compare.Streamer, error) { return compare.StartRPRStream(ctx, redisURL) }},
		{"grpc", func() (compare.Streamer, error) { return compare.StartGRPCStream(ctx) }},
	}
}
