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
		res, err := compare.RunAsync(ctx, compare.AsyncOptions{Tasks: s.asyncTasks, RedisServer: s.redisBin, Timeout: s.runTimeout})
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
		fmt.Fprintf(log, "  async run %d (asynq %s): rpr %.0f tasks/s, %.2f cmds/task; asynq %.0f tasks/s, %.2f cmds/task\n",
			run+1, res.AsynqVersion, rate(r), perTask(float64(r.RedisCommands), r), rate(a), perTask(float64(a.RedisCommands), a))
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
