// Command streamcompare measures rpr's streaming calls against gRPC-go in
// one process and one run, and prints one table of the figures and their
// ratios:
//
//   - server streaming: -messages messages of -size bytes (default
//     200,000 of 1 KiB) received over 1 and then 16 concurrent streams:
//     messages/s, MB/s, Redis commands per message (the goal is 1.2 or
//     fewer), CPU per message;
//   - bidirectional ping-pong: -rounds round trips (default 10,000) of
//     -size bytes on one stream: p50 and p99 of the round trip.
//
// Run it from bench/:
//
//	go run ./streamcompare
//	go run ./streamcompare -messages 50000 -streams 1,4 -rounds 2000 -size 1024
//
// It starts its own redis-server (found on PATH, or -redis-server, or
// $RPR_REDIS_SERVER) on a free loopback port with a temporary directory
// and no persistence, and stops it at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"text/tabwriter"

	"google.golang.org/grpc"

	"github.com/rprtunnel/rpr/bench/internal/compare"
)

func main() {
	messages := flag.Int("messages", 200_000, "server streaming: messages per run, spread over the streams")
	levels := flag.String("streams", "1,16", "server streaming: comma-separated numbers of concurrent streams")
	rounds := flag.Int("rounds", 10_000, "ping-pong: round trips on one bidirectional stream")
	size := flag.Int("size", 1024, "payload bytes per message")
	redisServer := flag.String("redis-server", "", "redis-server binary (default: $RPR_REDIS_SERVER, else the one on PATH)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./streamcompare [flags]   (from bench/)\n\n"+
			"Streaming calls, rpr through a real redis-server vs gRPC-go over loopback TCP, in one process.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	streams, err := compare.ParseLevels(*levels)
	switch {
	case err != nil:
		usageError("-streams %q: %v; e.g. -streams 1,16", *levels, err)
	case *messages < 1:
		usageError("-messages %d: want at least 1, e.g. -messages 200000", *messages)
	case *rounds < 1:
		usageError("-rounds %d: want at least 1, e.g. -rounds 10000", *rounds)
	case *size < 0 || *size > 1<<20:
		usageError("-size %d: want 0 to 1048576 bytes, e.g. -size 1024", *size)
	case flag.NArg() > 0:
		usageError("unexpected argument %q: everything is a flag, e.g. -messages 50000", flag.Arg(0))
	}
	compare.RunMain("streamcompare", func(ctx context.Context) error {
		return run(ctx, os.Stdout, os.Stderr, config{messages: *messages, streams: streams, rounds: *rounds, size: *size, redisServer: *redisServer})
	})
}

func usageError(format string, args ...any) {
	compare.UsageError("streamcompare", format, args...)
}

type config struct {
	messages, rounds, size int
	streams                []int
	redisServer            string
}

// row is one workload's two results.
type row struct {
	name      string
	pingPong  bool
	rpr, grpc compare.StreamResult
}

func run(ctx context.Context, out, log io.Writer, cfg config) error {
	rs, err := compare.StartRedis(cfg.redisServer)
	if err != nil {
		return err
	}
	defer rs.Stop()
	startRPR := func() (compare.Streamer, error) { return compare.StartRPRStream(ctx, rs.URL()) }
	startGRPC := func() (compare.Streamer, error) { return compare.StartGRPCStream(ctx) }

	var rows []row
	// One system at a time, each started afresh, so neither's idle
	// goroutines count in the other's CPU figure.
	both := func(r row, measure func(compare.Streamer) (compare.StreamResult, error)) error {
		fmt.Fprintf(log, "%s: rpr ...", r.name)
		var err error
		if r.rpr, err = measureSystem(startRPR, measure); err != nil {
			return fmt.Errorf("rpr, %s: %w", r.name, err)
		}
		fmt.Fprintf(log, " %.0f/s; gRPC ...", r.rpr.PerSecond())
		if r.grpc, err = measureSystem(startGRPC, measure); err != nil {
			return fmt.Errorf("gRPC, %s: %w", r.name, err)
		}
		fmt.Fprintf(log, " %.0f/s\n", r.grpc.PerSecond())
		rows = append(rows, r)
		return nil
	}
	for _, n := range cfg.streams {
		if ctx.Err() != nil {
			break
		}
		name := fmt.Sprintf("server stream x%d", n)
		if err := both(row{name: name}, func(sys compare.Streamer) (compare.StreamResult, error) {
			return compare.MeasureFeed(ctx, sys, n, cfg.messages, cfg.size)
		}); err != nil {
			return err
		}
	}
	if ctx.Err() == nil {
		if err := both(row{name: "bidi ping-pong x1", pingPong: true}, func(sys compare.Streamer) (compare.StreamResult, error) {
			return compare.MeasurePingPong(ctx, sys, cfg.rounds, cfg.size)
		}); err != nil {
			return err
		}
	}

	fmt.Fprintf(out, "streaming, %d B messages; server streams: %d messages per run over 1..n streams; ping-pong: %d round trips on one stream; %s %s/%s, GOMAXPROCS %d\n",
		cfg.size, cfg.messages, cfg.rounds, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))
	fmt.Fprintf(out, "rpr:  client and server in this process, through redis-server %s on loopback\n", rs.Version)
	fmt.Fprintf(out, "gRPC: gRPC-go %s, client and server in this process, loopback TCP, no TLS\n\n", grpc.Version)
	writeTable(out, rows)
	fmt.Fprintln(out, "\nmsgs/s: messages received per second (ping-pong: round trips per second); MB/s: payload, one way.")
	fmt.Fprintln(out, "cmds/msg: commands redis-server executed per message (INFO commandstats, inside Lua scripts included); ping-pong: per round trip (two messages).")
	fmt.Fprintln(out, "cpu µs/msg: this process's user+system CPU (client and server) per message; for rpr, + redis-server's.")
	fmt.Fprintln(out, "ratio columns: rpr / gRPC (msgs/s below 1 means rpr is slower; p50, p99 and cpu above 1 mean rpr takes more).")
	for _, r := range rows {
		for _, x := range []struct {
			name string
			res  compare.StreamResult
		}{{"rpr", r.rpr}, {"gRPC", r.grpc}} {
			if x.res.Errors > 0 {
				fmt.Fprintf(out, "warning: %s, %s: %v\n", x.name, r.name, x.res.FirstErr)
			}
		}
	}
	if ctx.Err() != nil {
		return errors.New("interrupted: the table has the workloads finished before Ctrl-C")
	}
	return nil
}

func measureSystem(start func() (compare.Streamer, error), measure func(compare.Streamer) (compare.StreamResult, error)) (compare.StreamResult, error) {
	sys, err := start()
	if err != nil {
		return compare.StreamResult{}, err
	}
	defer sys.Close()
	return measure(sys)
}

func writeTable(out io.Writer, rows []row) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\t"+
		"rpr msgs/s\trpr MB/s\trpr p50 ms\trpr p99 ms\trpr cmds/msg\trpr cpu µs/msg (process+redis)\t"+
		"gRPC msgs/s\tgRPC MB/s\tgRPC p50 ms\tgRPC p99 ms\tgRPC cpu µs/msg\t"+
		"rpr/gRPC msgs/s\trpr/gRPC p50\trpr/gRPC p99\trpr/gRPC cpu\t")
	for _, r := range rows {
		rprProc, rprRedis, grpcProc := r.rpr.PerMessage(r.rpr.ProcessCPU), r.rpr.PerMessage(r.rpr.RedisCPU), r.grpc.PerMessage(r.grpc.ProcessCPU)
		rprCPU, cpuRatio := "n/a", "n/a"
		if rprProc >= 0 && rprRedis >= 0 {
			rprCPU = fmt.Sprintf("%.1f (%.1f+%.1f)", rprProc+rprRedis, rprProc, rprRedis)
			if grpcProc > 0 {
				cpuRatio = fmt.Sprintf("%.1f", (rprProc+rprRedis)/grpcProc)
			}
		}
		p50, p99, gp50, gp99, r50, r99 := "-", "-", "-", "-", "-", "-"
		if r.pingPong {
			p50, p99, gp50, gp99 = compare.Millis(r.rpr.P50), compare.Millis(r.rpr.P99), compare.Millis(r.grpc.P50), compare.Millis(r.grpc.P99)
			if r.grpc.P50 > 0 && r.grpc.P99 > 0 {
				r50 = fmt.Sprintf("%.1f", float64(r.rpr.P50)/float64(r.grpc.P50))
				r99 = fmt.Sprintf("%.1f", float64(r.rpr.P99)/float64(r.grpc.P99))
			}
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.1f\t%s\t%s\t%.2f\t%s\t%.0f\t%.1f\t%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t\n",
			r.name,
			r.rpr.PerSecond(), r.rpr.MBPerSecond(), p50, p99, r.rpr.CommandsPerMessage(), rprCPU,
			r.grpc.PerSecond(), r.grpc.MBPerSecond(), gp50, gp99, micros(grpcProc),
			r.rpr.PerSecond()/r.grpc.PerSecond(), r50, r99, cpuRatio)
	}
	tw.Flush()
}

func micros(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
