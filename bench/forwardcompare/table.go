package main

// The table of figures and ratios, and the notes under it.

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/rprtunnel/rpr/bench/internal/compare"
)

// writeTable prints a row per workload, level and system, with the
// ratios to the direct and reverse-proxy rows of the same workload and
// level.
func writeTable(out io.Writer, rows []row) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tconcurrency\tsystem\treq/s\tp50 ms\tp99 ms\tcmds/req\tcpu µs/req\t(this+ingress+egress+redis)\t"+
		"req/s ÷direct\tp50 ÷direct\tcpu ÷direct\treq/s ÷proxy\tp50 ÷proxy\tcpu ÷proxy\t")
	find := func(r row, want role) *row {
		for i := range rows {
			if o := &rows[i]; o.workload == r.workload && o.concurrency == r.concurrency && o.role == want && !o.skipped() {
				return o
			}
		}
		return nil
	}
	for _, r := range rows {
		if r.skipped() {
			fmt.Fprintf(tw, "%s\t%d\t%s\tskipped\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t\n", r.workload, r.concurrency, r.system)
			continue
		}
		total, split := cpu(r.res)
		cmds := "-"
		if r.res.RedisCommands >= 0 {
			cmds = fmt.Sprintf("%.2f", float64(r.res.RedisCommands)/float64(r.res.Calls))
		}
		ratios := func(base *row) string {
			if base == nil || base.role == r.role {
				return "-\t-\t-"
			}
			baseCPU, _ := cpu(base.res)
			cpuRatio := "n/a"
			if total >= 0 && baseCPU > 0 {
				cpuRatio = fmt.Sprintf("%.1f", total/baseCPU)
			}
			return fmt.Sprintf("%.2f\t%.1f\t%s", r.res.CallsPerSecond()/base.res.CallsPerSecond(), float64(r.res.P50)/float64(max(base.res.P50, time.Nanosecond)), cpuRatio)
		}
		proxyRatios := "-\t-\t-"
		if r.role == viaRPR {
			proxyRatios = ratios(find(r, proxy))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			r.workload, r.concurrency, r.system,
			r.res.CallsPerSecond(), compare.Millis(r.res.P50), compare.Millis(r.res.P99), cmds, micros(total), split,
			ratios(find(r, direct)), proxyRatios)
	}
	tw.Flush()
}

// notes says why rows were skipped (once per system) and which runs had
// failed requests.
func notes(out io.Writer, rows []row) {
	said := map[string]bool{}
	for _, r := range rows {
		key := r.workload + "/" + r.system
		switch {
		case r.skipped() && said[key]:
		case r.skip != "":
			said[key] = true
			fmt.Fprintf(out, "note: %s, %s: skipped: %s\n", r.workload, r.system, r.skip)
		case r.warn != "":
			said[key] = true
			fmt.Fprintf(out, "warning: %s, %s: not measured: %s\n", r.workload, r.system, r.warn)
		case r.res.Errors > 0:
			fmt.Fprintf(out, "warning: %s, concurrency %d, %s: %d of %d requests failed, first: %v\n", r.workload, r.concurrency, r.system, r.res.Errors, r.res.Calls, r.res.FirstErr)
		}
	}
}

// writeCommands prints, for each rpr run, Redis's commands per request by
// command.
func writeCommands(out io.Writer, rows []row) {
	fmt.Fprintln(out, "\nRedis commands per request, by command (INFO commandstats; EVALSHA is one, the commands its script runs count too):")
	for _, r := range rows {
		if r.role != viaRPR || r.skipped() {
			continue
		}
		fmt.Fprintf(out, "  %s, concurrency %d, %s:", r.workload, r.concurrency, r.system)
		for _, c := range r.commands {
			if v := float64(c.calls) / float64(r.res.Calls); v >= 0.005 {
				fmt.Fprintf(out, " %s %.2f", c.name, v)
			}
		}
		fmt.Fprintln(out)
	}
}

// cpu is a row's CPU per request, all processes together, and its split
// (this process + ingress + egress + redis) for rpr; -1 when not
// measured.
func cpu(r compare.Result) (total float64, split string) {
	proc := r.PerCall(r.ProcessCPU)
	if proc < 0 {
		return -1, "n/a"
	}
	if r.RedisCPU < 0 {
		return proc, "-"
	}
	total, split = proc, strconv.FormatFloat(proc, 'f', 0, 64)
	for _, d := range append(slices.Clone(r.OtherCPU), r.RedisCPU) {
		v := r.PerCall(d)
		total += v
		split += "+" + strconv.FormatFloat(v, 'f', 0, 64)
	}
	return total, split
}

func micros(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
