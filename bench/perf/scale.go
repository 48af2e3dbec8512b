package main

// Goal 3: Redis's CPU per call flat from 1 to 16 client instances, at 16
// and at 128 concurrent callers, the server in a child process.

import (
	"context"
	"fmt"
	"io"

	"github.com/rprtunnel/rpr/bench/internal/compare"
)

// scaleTarget is goal 3's "within 15%": Redis µs per call with n
// instances at most 1.15 times what it is with one.
const scaleTarget = 1.15

var (
	scaleLevels    = [...]int{16, 128}
	scaleInstances = [...]int{1, 8, 16}
)

func runScale(ctx context.Context, s *settings, log io.Writer) ([]compare.Row, error) {
	srv, err := startServers(ctx, s.redisBin, false, log)
	if err != nil {
		return nil, err
	}
	defer srv.close()
	// byLevel[i][j]: the runs at scaleLevels[i] with scaleInstances[j].
	var byLevel [len(scaleLevels)][len(scaleInstances)]runs
	payload := make([]byte, unaryPayload)
	for run := range s.runs {
		for i, c := range scaleLevels {
			for j, inst := range scaleInstances {
				sys, clients, err := srv.rprSystem(ctx, inst)
				if err != nil {
					return nil, err
				}
				f, err := measure(ctx, sys, payload, c, s.calls, s.warmup, s.runTimeout)
				clients.Close()
				if err != nil {
					return nil, err
				}
				f.log(log, fmt.Sprintf("rpr  c=%d inst=%d run %d/%d", c, inst, run+1, s.runs))
				byLevel[i][j] = append(byLevel[i][j], f)
			}
		}
	}
	redisCPU := func(f figures) float64 { return f.redisCPU() }
	io := func(f figures) float64 { return f.io() }
	var rows []compare.Row
	for i, c := range scaleLevels {
		one := byLevel[i][0].med(redisCPU)
		for j, inst := range scaleInstances[1:] {
			rows = append(rows, compare.Row{
				Goal: 3, Figure: fmt.Sprintf("Redis CPU µs/call, %d instances, c=%d", inst, c),
				RPR: byLevel[i][j+1].med(redisCPU), Baseline: one, BaselineOf: "1 instance",
				Target: compare.RatioAtMost(scaleTarget),
			})
		}
		// What grows with the instances: Redis's reads and writes of
		// connections per call (its per-round-trip work), beside it.
		last := len(scaleInstances) - 1
		rows = append(rows, compare.Row{
			Goal: 3, Figure: fmt.Sprintf("Redis connection reads+writes per call, %d instances, c=%d", scaleInstances[last], c),
			RPR: byLevel[i][last].med(io), Baseline: byLevel[i][0].med(io), BaselineOf: "1 instance", Target: compare.NoTarget,
		})
	}
	return rows, nil
}
