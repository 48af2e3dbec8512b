package main

// Goal 2: rpr's async requests end to end against asynq's tasks in the
// same run (compare.RunAsync: 16 producers, a processing server 256 wide
// in this process for both, each system on a redis-server of its own).

import (
	"context"
	"fmt"
	"io"

	"github.com/rprtunnel/rpr/bench/internal/compare"
)

// asyncMaxCommands is goal 2's bound on Redis commands per async request,
// end to end (enqueue, read, run, done marker, retire; background work
// included).
const asyncMaxCommands = 5

// asyncMinRatio is goal 2's bound on rpr's tasks/s over asynq's.
const asyncMinRatio = 5

func runAsync(ctx context.Context, s *settings, log io.Writer) ([]compare.Row, error) {
	var rprRate, asynqRate, rprCmds, asynqCmds, rprCPU, asynqCPU []float64
	for run := range s.asyncRuns {
		res, err := compare.RunAsync(ctx, compare.AsyncOptions{Tasks: s.asyncTasks, RedisServer: s.redisBin, Timeout: s.runTimeout,
			Profile: s.profilePath(fmt.Sprintf("async run %d of %d", run+1, s.asyncRuns))})
		if err != nil {
			return nil, err
		}
		r, a := res.RPR, res.Asynq
		perTask := func(n float64, sys compare.AsyncSystemResult) float64 { return n / float64(sys.Tasks) }
		rate := func(sys compare.AsyncSystemResult) float64 { return float64(sys.Tasks) / sys.Elapsed.Seconds() }
		cpu := func(sys compare.AsyncSystemResult) float64 {
			return perTask(float64((sys.RedisCPU + max(sys.ProcessCPU, 0)).Microseconds()), sys)
		}
		rprRate, asynqRate = append(rprRate, rate(r)), append(asynqRate, rate(a))
		rprCmds, asynqCmds = append(rprCmds, perTask(float64(r.RedisCommands), r)), append(asynqCmds, perTask(float64(a.RedisCommands), a))
		rprCPU, asynqCPU = append(rprCPU, cpu(r)), append(asynqCPU, cpu(a))
		// How the run ended says what bounds it: producers still enqueueing
		// at the end (enqueued near 100%) are bound by the enqueue's round
		// trip, a backlog left at the end by the processing.
		line := func(sys compare.AsyncSystemResult) string {
			return fmt.Sprintf("%.0f tasks/s, %.2f cmds/task, %.1f µs CPU/task, all enqueued at %.0f%% of the run, enqueue p50 %.3f ms",
				rate(sys), perTask(float64(sys.RedisCommands), sys), cpu(sys), 100*sys.Enqueued.Seconds()/sys.Elapsed.Seconds(), float64(sys.P50.Microseconds())/1000)
		}
		fmt.Fprintf(log, "  async run %d (asynq %s):\n    rpr   %s\n    asynq %s\n", run+1, res.AsynqVersion, line(r), line(a))
	}
	return []compare.Row{
		{Goal: 2, Figure: fmt.Sprintf("async tasks/s end to end, %d tasks from 16 producers", s.asyncTasks),
			RPR: median(rprRate), Baseline: median(asynqRate), BaselineOf: "asynq", Target: compare.RatioAtLeast(asyncMinRatio)},
		{Goal: 2, Figure: "Redis commands per async request, end to end",
			RPR: median(rprCmds), Baseline: median(asynqCmds), BaselineOf: "asynq", Target: compare.AtMost(asyncMaxCommands)},
		{Goal: 2, Figure: "CPU µs per async request (this process + Redis)",
			RPR: median(rprCPU), Baseline: median(asynqCPU), BaselineOf: "asynq", Target: compare.NoTarget},
	}, nil
}
