// Command grpccompare measures rpr against gRPC-go in one process and one
// run: a unary echo of the same payload through a real redis-server (rpr)
// and over loopback TCP (gRPC), at the same concurrency levels, with the
// same number of calls, and prints one table: calls/s, p50 and p99 of
// each, their ratios, and CPU per call (this process for both, plus
// redis-server for rpr).
//
//	cd bench && go run ./grpccompare                       # 20,000 calls at 1, 16, 128
//	go run ./grpccompare -calls 5000 -concurrency 1,16,128 -payload 1024
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
	"runtime/pprof"
	"strconv"
	"text/tabwriter"

	"google.golang.org/grpc"

	"github.com/rprtunnel/rpr/bench/internal/compare"
)

func main() {
	calls := flag.Int("calls", 20000, "measured calls per system and concurrency level")
	levels := flag.String("concurrency", "1,16,128", "comma-separated concurrency levels (callers, each with one call in flight)")
	payload := flag.Int("payload", 128, "payload bytes per request (echoed back)")
	warmup := flag.Int("warmup", 1000, "calls made and not measured before each run")
	redisServer := flag.String("redis-server", "", "redis-server binary (default: $RPR_REDIS_SERVER, else the one on PATH)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (both systems) to this file, for go tool pprof")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./grpccompare [flags]   (from bench/)\n\n"+
			"Unary echo, rpr through a real redis-server vs gRPC-go over loopback TCP, in one process.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	conc, err := compare.ParseLevels(*levels)
	switch {
	case err != nil:
		usageError("-concurrency %q: %v; e.g. -concurrency 1,16,128", *levels, err)
	case *calls < 1:
		usageError("-calls %d: want at least 1, e.g. -calls 20000", *calls)
	case *payload < 0 || *payload > 1<<20:
		usageError("-payload %d: want 0 to 1048576 bytes, e.g. -payload 128", *payload)
	case *warmup < 0:
		usageError("-warmup %d: want 0 or more calls, e.g. -warmup 1000", *warmup)
	case flag.NArg() > 0:
		usageError("unexpected argument %q: everything is a flag, e.g. -calls 5000", flag.Arg(0))
	}

	var profile *os.File
	if *cpuProfile != "" {
		if profile, err = os.Create(*cpuProfile); err != nil {
			usageError("-cpuprofile: %v", err)
		}
	}
	compare.RunMain("grpccompare", func(ctx context.Context) error {
		if profile != nil { // stopped before RunMain exits, even on failure
			if err := pprof.StartCPUProfile(profile); err != nil {
				return fmt.Errorf("-cpuprofile: %w", err)
			}
			defer func() {
				pprof.StopCPUProfile()
				_ = profile.Close()
			}()
		}
		return run(ctx, os.Stdout, os.Stderr, config{calls: *calls, levels: conc, payload: *payload, warmup: *warmup, redisServer: *redisServer})
	})
}

func usageError(format string, args ...any) {
	compare.UsageError("grpccompare", format, args...)
}

type config struct {
	calls, payload, warmup int
	levels                 []int
	redisServer            string
}

// row is one concurrency level's two results.
type row struct {
	concurrency int
	rpr, grpc   compare.Result
}

func run(ctx context.Context, out, log io.Writer, cfg config) error {
	rs, err := compare.StartRedis(cfg.redisServer)
	if err != nil {
		return err
	}
	defer rs.Stop()
	payload := make([]byte, cfg.payload)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}

	var rows []row
	for _, c := range cfg.levels {
		if ctx.Err() != nil {
			break
		}
		r := row{concurrency: c}
		// One system at a time, each started afresh, so neither's idle
		// goroutines count in the other's CPU figure.
		fmt.Fprintf(log, "concurrency %d: rpr ...", c)
		if r.rpr, err = measureSystem(ctx, func() (compare.Echoer, error) { return compare.StartRPR(ctx, rs.URL()) }, payload, c, cfg); err != nil {
			return fmt.Errorf("rpr at concurrency %d: %w", c, err)
		}
		fmt.Fprintf(log, " %.0f calls/s; gRPC ...", r.rpr.CallsPerSecond())
		if r.grpc, err = measureSystem(ctx, func() (compare.Echoer, error) { return compare.StartGRPC(ctx) }, payload, c, cfg); err != nil {
			return fmt.Errorf("gRPC at concurrency %d: %w", c, err)
		}
		fmt.Fprintf(log, " %.0f calls/s\n", r.grpc.CallsPerSecond())
		rows = append(rows, r)
	}

	fmt.Fprintf(out, "unary echo, %d B payload each way, %d calls per run after %d warm-up calls; %s %s/%s, GOMAXPROCS %d\n",
		cfg.payload, cfg.calls, cfg.warmup, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))
	fmt.Fprintf(out, "rpr:  client and server in this process, through redis-server %s on loopback\n", rs.Version)
	fmt.Fprintf(out, "gRPC: gRPC-go %s, client and server in this process, loopback TCP, no TLS\n\n", grpc.Version)
	writeTable(out, rows)
	fmt.Fprintln(out, "\ncpu µs/call: this process's user+system CPU (client and server) per call; for rpr, + redis-server's (INFO cpu).")
	fmt.Fprintln(out, "ratio columns: rpr / gRPC (calls/s below 1 means rpr is slower; p50 and cpu above 1 mean rpr takes more).")
	for _, r := range rows {
		for _, x := range []struct {
			name string
			res  compare.Result
		}{{"rpr", r.rpr}, {"gRPC", r.grpc}} {
			if x.res.Errors > 0 {
				fmt.Fprintf(out, "warning: %s at concurrency %d: %d of %d calls failed, first: %v\n", x.name, r.concurrency, x.res.Errors, x.res.Calls, x.res.FirstErr)
			}
		}
	}
	if ctx.Err() != nil {
		return errors.New("interrupted: the table has the levels finished before Ctrl-C")
	}
	return nil
}

func measureSystem(ctx context.Context, start func() (compare.Echoer, error), payload []byte, concurrency int, cfg config) (compare.Result, error) {
	sys, err := start()
	if err != nil {
		return compare.Result{}, err
	}
	defer sys.Close()
	return compare.Measure(ctx, sys, payload, concurrency, cfg.calls, cfg.warmup)
}

func writeTable(out io.Writer, rows []row) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "concurrency\t"+
		"rpr calls/s\trpr p50 ms\trpr p99 ms\trpr cmds/call\trpr cpu µs/call (process+redis)\t"+
		"gRPC calls/s\tgRPC p50 ms\tgRPC p99 ms\tgRPC cpu µs/call\t"+
		"rpr/gRPC calls/s\trpr/gRPC p50\trpr/gRPC cpu\t")
	for _, r := range rows {
		rprProc, rprRedis, grpcProc := r.rpr.PerCall(r.rpr.ProcessCPU), r.rpr.PerCall(r.rpr.RedisCPU), r.grpc.PerCall(r.grpc.ProcessCPU)
		rprCPU, cpuRatio := "n/a", "n/a"
		if rprProc >= 0 && rprRedis >= 0 {
			rprCPU = fmt.Sprintf("%.0f (%.0f+%.0f)", rprProc+rprRedis, rprProc, rprRedis)
			if grpcProc > 0 {
				cpuRatio = fmt.Sprintf("%.1f", (rprProc+rprRedis)/grpcProc)
			}
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%s\t%s\t%.2f\t%s\t%.0f\t%s\t%s\t%s\t%.2f\t%.1f\t%s\t\n",
			r.concurrency,
			r.rpr.CallsPerSecond(), compare.Millis(r.rpr.P50), compare.Millis(r.rpr.P99), float64(r.rpr.RedisCommands)/float64(r.rpr.Calls), rprCPU,
			r.grpc.CallsPerSecond(), compare.Millis(r.grpc.P50), compare.Millis(r.grpc.P99), micros(grpcProc),
			r.rpr.CallsPerSecond()/r.grpc.CallsPerSecond(), float64(r.rpr.P50)/float64(r.grpc.P50), cpuRatio)
	}
	tw.Flush()
}

func micros(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
