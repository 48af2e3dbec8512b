// Command asynccompare measures rpr's async requests against asynq's tasks
// end to end in one run: each system enqueues the same number of small
// tasks from the same number of goroutines to a processing server in this
// process, against a redis-server of its own, and the time runs from the
// first enqueue until every task has been handled. It prints one table:
// tasks/s, enqueue latency, Redis commands and CPU per task, this
// process's CPU per task, and the ratios rpr/asynq.
//
//	cd bench && go run ./asynccompare                   # 20,000 tasks, 16 producers, concurrency 256
//	go run ./asynccompare -tasks 5000 -producers 16 -concurrency 256
//
// Each redis-server is found on PATH (or -redis-server, or
// $RPR_REDIS_SERVER), started on a free loopback port with a temporary
// directory and no persistence, and stopped after its system.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/rprtunnel/rpr/bench/internal/compare"
)

func main() {
	tasks := flag.Int("tasks", 20000, "tasks each system enqueues and processes in the measured run")
	producers := flag.Int("producers", 16, "goroutines enqueueing, each one task after the other")
	concurrency := flag.Int("concurrency", 256, "the processing server's concurrency, on both (rpr ServerOptions.Concurrency, asynq Config.Concurrency)")
	payload := flag.Int("payload", 32, "bytes per task payload, a marshalled BytesValue (2 or more)")
	warmup := flag.Int("warmup", 100, "tasks enqueued and processed, not measured, before each system's run")
	timeout := flag.Duration("timeout", 2*time.Minute, "bound on each system's whole run")
	checkInterval := flag.Duration("asynq-task-check-interval", 0, "asynq Config.TaskCheckInterval, its sleep when the queue is empty (0: asynq's default, 1s)")
	redisServer := flag.String("redis-server", "", "redis-server binary (default: $RPR_REDIS_SERVER, else the one on PATH)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./asynccompare [flags]   (from bench/)\n\n"+
			"Async end to end, rpr vs asynq, each against its own redis-server, servers in this process.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	switch {
	case *tasks < 1:
		usageError("-tasks %d: want at least 1, e.g. -tasks 20000", *tasks)
	case *producers < 1:
		usageError("-producers %d: want at least 1, e.g. -producers 16", *producers)
	case *concurrency < 1:
		usageError("-concurrency %d: want at least 1, e.g. -concurrency 256", *concurrency)
	case *payload < 2 || *payload > 1<<20:
		usageError("-payload %d: want 2 to 1048576 bytes, e.g. -payload 32", *payload)
	case *warmup < 0:
		usageError("-warmup %d: want 0 or more tasks, e.g. -warmup 100", *warmup)
	case *timeout <= 0:
		usageError("-timeout %v: want a positive duration, e.g. -timeout 2m", *timeout)
	case *checkInterval < 0:
		usageError("-asynq-task-check-interval %v: want 0 (asynq's default) or a positive duration", *checkInterval)
	case flag.NArg() > 0:
		usageError("unexpected argument %q: everything is a flag, e.g. -tasks 5000", flag.Arg(0))
	}
	opts := compare.AsyncOptions{
		Tasks: *tasks, Producers: *producers, Concurrency: *concurrency, Payload: *payload,
		Warmup: *warmup, Timeout: *timeout, AsynqTaskCheckInterval: *checkInterval,
		RedisServer: *redisServer, Log: os.Stderr,
	}
	if *warmup == 0 {
		opts.Warmup = -1 // none; zero would mean the default
	}

	compare.RunMain("asynccompare", func(ctx context.Context) error {
		return run(ctx, os.Stdout, opts)
	})
}

func usageError(format string, args ...any) {
	compare.UsageError("asynccompare", format, args...)
}

func run(ctx context.Context, out io.Writer, opts compare.AsyncOptions) error {
	res, err := compare.RunAsync(ctx, opts)
	if err != nil {
		return err
	}
	o := res.Options
	fmt.Fprintf(out, "async end to end: %d tasks of %d B from %d producers, after %d warm-up tasks; %s %s/%s, GOMAXPROCS %d\n",
		o.Tasks, o.Payload, o.Producers, o.Warmup, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))
	fmt.Fprintf(out, "both: client and processing server in this process (server concurrency %d), each system against a fresh redis-server %s on loopback\n",
		o.Concurrency, res.RPR.RedisVersion)
	fmt.Fprintf(out, "rpr:   async method (tunnel.MethodDesc{Async: true}), client.Enqueue, default retry policy and idempotency window\n")
	fmt.Fprintf(out, "asynq: %s, %s\n\n", res.AsynqVersion, compare.AsynqSettings(o))
	writeTable(out, res)
	fmt.Fprintln(out, "\ntasks/s: tasks over the time from the first enqueue until the handler had processed the last; enqueued/s: until the last enqueue returned.")
	fmt.Fprintln(out, "cmds/req, redis cpu, go cpu: from just before the first enqueue until the system had stopped (INFO commandstats with Lua's commands, INFO cpu, getrusage of this process).")
	fmt.Fprintln(out, "rpr/asynq: tasks/s above 1 means rpr is faster; the others above 1 mean rpr takes more.")
	for _, r := range []compare.AsyncSystemResult{res.RPR, res.Asynq} {
		if r.GoroutinesLeft > 0 {
			fmt.Fprintf(out, "warning: %s left %d goroutines running after it was stopped\n", r.System, r.GoroutinesLeft)
		}
	}
	return nil
}

func writeTable(out io.Writer, res compare.AsyncResult) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\ttasks/s\tenqueued/s\tenqueue p50 ms\tenqueue p99 ms\tcmds/req\tredis cpu µs/req\tgo cpu µs/req\t")
	for _, r := range []compare.AsyncSystemResult{res.RPR, res.Asynq} {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%s\t%.2f\t%s\t%s\t\n", r.System,
			r.PerSecond(), r.EnqueuedPerSecond(), compare.Millis(r.P50), compare.Millis(r.P99),
			r.CommandsPerTask(), micros(r.PerTask(r.RedisCPU)), micros(r.PerTask(r.ProcessCPU)))
	}
	a, b := res.RPR, res.Asynq
	fmt.Fprintf(tw, "rpr/asynq\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
		ratio(a.PerSecond(), b.PerSecond()), ratio(a.EnqueuedPerSecond(), b.EnqueuedPerSecond()),
		ratio(float64(a.P50), float64(b.P50)), ratio(float64(a.P99), float64(b.P99)),
		ratio(a.CommandsPerTask(), b.CommandsPerTask()),
		ratio(a.PerTask(a.RedisCPU), b.PerTask(b.RedisCPU)), ratio(a.PerTask(a.ProcessCPU), b.PerTask(b.ProcessCPU)))
	tw.Flush()
}

func micros(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// ratio formats a/b, or n/a when either is unknown (negative) or b is 0.
func ratio(a, b float64) string {
	if a < 0 || b <= 0 {
		return "n/a"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64)
}
