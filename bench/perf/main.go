// Command perf measures the goals of issue 18 in one run and prints one
// table, a row per figure: rpr's value, its baseline (gRPC-go, a figure
// from the issue, or rpr itself in another configuration), the ratio, the
// target and whether it is met. Every server runs in a child process
// (this program run again), against a redis-server the program starts.
//
//	cd bench && go run ./perf            # everything, about 3-5 minutes on 2 CPUs
//	go run ./perf -quick                 # a short smoke run
//	go run ./perf -only unary,scale -calls 5000
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/rprtunnel/rpr/bench/internal/compare"
)

// settings are the run's, all from flags, printed at the top.
type settings struct {
	calls, warmup, runs int
	// callsBusy are the unary section's measured calls per run at goal
	// 1's level (see unaryCalls).
	callsBusy int
	// asyncRuns are goal 2's runs, more than the others': each is short,
	// and asynq's rate moves by a third between runs.
	asyncRuns          int
	instances          int
	calls64K, calls1M  int
	asyncTasks         int
	idleWindow, settle time.Duration
	runTimeout         time.Duration
	only               []string
	redisBin           string
	// profileDir, when set, receives CPU profiles of every measured run
	// (see settings.profilePath).
	profileDir string
}

// unaryCalls is how many calls the unary section measures per run at
// concurrency c: callsBusy at goal 1's level, calls below it.
func (s *settings) unaryCalls(c int) int {
	if c >= goal1Level {
		return s.callsBusy
	}
	return s.calls
}

// profilePath is where the CPU profiles of the run called label go, as
// a prefix (measure adds .callers.prof and .server.prof): "" when the
// run is not profiled.
func (s *settings) profilePath(label string) string {
	if s.profileDir == "" {
		return ""
	}
	name := strings.Join(strings.FieldsFunc(label, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '='
	}), "-")
	return filepath.Join(s.profileDir, name)
}

// section is one measurement that adds rows to the table.
type section struct {
	name string
	run  func(ctx context.Context, s *settings, log io.Writer) ([]compare.Row, error)
}

// sections are the measurements, in the order they run. The table sorts
// their rows by goal.
func sections() []section {
	return []section{
		{"unary", runUnary}, // goals 1 and 4
		{"async", runAsync}, // goal 2
		{"scale", runScale}, // goal 3
		{"large", runLarge}, // goal 5
		{"idle", runIdle},   // goal 6
	}
}

func main() {
	if ran, code := compare.RunChildIfAsked(); ran {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	s, err := parseFlags(args, stderr)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintln(stderr, "perf:", err)
		return 2
	}
	printSettings(stdout, s)
	rows, failed := measureAll(ctx, s, stdout, stderr)
	fmt.Fprintln(stdout)
	printTable(stdout, rows)
	if failed {
		return 1
	}
	return 0
}

// measureAll runs the sections -only names, each after the other, and
// returns their rows; a section that fails is reported on stderr and the
// others still run.
func measureAll(ctx context.Context, s *settings, log, stderr io.Writer) (rows []compare.Row, failed bool) {
	for _, sec := range sections() {
		if !slices.Contains(s.only, sec.name) {
			continue
		}
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "perf: interrupted: %s not run\n", sec.name)
			failed = true
			continue
		}
		fmt.Fprintf(log, "\n== %s\n", sec.name)
		t0 := time.Now()
		r, err := sec.run(ctx, s, log)
		if err != nil {
			fmt.Fprintf(stderr, "perf: %s: %v\n", sec.name, err)
			failed = true
			continue
		}
		fmt.Fprintf(log, "  (%s: %.1fs)\n", sec.name, time.Since(t0).Seconds())
		rows = append(rows, r...)
	}
	slices.SortStableFunc(rows, func(a, b compare.Row) int { return cmp.Compare(a.Goal, b.Goal) })
	return rows, failed
}

func parseFlags(args []string, stderr io.Writer) (*settings, error) {
	fs := flag.NewFlagSet("perf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	s := &settings{}
	var only string
	var quick bool
	fs.IntVar(&s.calls, "calls", 20_000, "measured calls per run of the 32-byte echo (unary and scale)")
	fs.IntVar(&s.callsBusy, "calls-c128", 100_000, "measured calls per run of the unary section at c=128, goal 1's level: at 40,000-60,000 calls/s, -calls would be a run of under half a second, which one burst of the machine's other load can tip")
	fs.IntVar(&s.warmup, "warmup", 0, "unmeasured calls before each run at the least; a run with more calls warms up with a tenth of them (default: a tenth of -calls)")
	fs.IntVar(&s.runs, "runs", 3, "runs of each configuration; each figure is the median over them")
	fs.IntVar(&s.instances, "instances", 8, "rpr client instances the callers of the unary and large sections are spread over at concurrency > 1 (scale runs 1, 8 and 16)")
	fs.IntVar(&s.calls64K, "calls-64k", 2_000, "measured calls per run of the 64 KiB echo")
	fs.IntVar(&s.calls1M, "calls-1m", 200, "measured calls per run of the 1 MiB echo")
	fs.IntVar(&s.asyncTasks, "async-tasks", 20_000, "async tasks per run, for rpr and for asynq")
	fs.IntVar(&s.asyncRuns, "async-runs", 5, "runs of the async section, rpr and asynq alternated; its figures are the medians")
	fs.DurationVar(&s.idleWindow, "idle-window", 10*time.Second, "how long idle processes' commands are counted")
	fs.DurationVar(&s.settle, "settle", 2*time.Second, "wait after starting or stopping idle processes before sampling Redis")
	fs.DurationVar(&s.runTimeout, "run-timeout", 2*time.Minute, "bound on one run's wall time (warm-up included)")
	fs.StringVar(&only, "only", "", "comma-separated sections to run (default all: "+strings.Join(sectionNames(), ",")+")")
	fs.StringVar(&s.profileDir, "cpuprofile", "", "a directory for CPU profiles of every measured run, the callers' and the server child's apart (async: one per system, producers and server together), profiling adding a little CPU to the figures")
	fs.StringVar(&s.redisBin, "redis-server", "", "redis-server binary (default $RPR_REDIS_SERVER, else the one on PATH)")
	fs.BoolVar(&quick, "quick", false, "a short run: 2,000 calls (5,000 at c=128), 1 run (async too), 200 and 20 large calls, 2,000 async tasks, a 2s idle window, 500ms settles (flags given explicitly win)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range map[string]string{"calls": "2000", "calls-c128": "5000", "runs": "1", "async-runs": "1", "calls-64k": "200", "calls-1m": "20", "async-tasks": "2000", "idle-window": "2s", "settle": "500ms"} {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return nil, err
				}
			}
		}
	}
	if s.profileDir != "" {
		if err := os.MkdirAll(s.profileDir, 0o755); err != nil {
			return nil, fmt.Errorf("-cpuprofile: %w", err)
		}
	}
	if s.warmup == 0 {
		s.warmup = max(10, s.calls/10)
	}
	for name, v := range map[string]int{"calls": s.calls, "calls-c128": s.callsBusy, "runs": s.runs, "instances": s.instances, "calls-64k": s.calls64K, "calls-1m": s.calls1M, "async-tasks": s.asyncTasks, "async-runs": s.asyncRuns} {
		if v < 1 {
			return nil, fmt.Errorf("-%s %d: must be at least 1", name, v)
		}
	}
	if s.idleWindow <= 0 || s.runTimeout <= 0 || s.settle < 0 {
		return nil, fmt.Errorf("-idle-window and -run-timeout must be positive, -settle not negative")
	}
	s.only = sectionNames()
	if only != "" {
		s.only = nil
		for name := range strings.SplitSeq(only, ",") {
			name = strings.TrimSpace(name)
			if !slices.Contains(sectionNames(), name) {
				return nil, fmt.Errorf("-only: no section %q (there are %s)", name, strings.Join(sectionNames(), ", "))
			}
			s.only = append(s.only, name)
		}
	}
	return s, nil
}

func sectionNames() []string {
	var names []string
	for _, s := range sections() {
		names = append(names, s.name)
	}
	return names
}

func printSettings(w io.Writer, s *settings) {
	redisBin := cmp.Or(s.redisBin, os.Getenv("RPR_REDIS_SERVER"), "redis-server on PATH")
	fmt.Fprintf(w, "perf: issue 18's goals, %s, %s/%s, GOMAXPROCS %d, %d CPUs\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU())
	fmt.Fprintf(w, "sections: %s; each figure the median of %d run(s); each run bounded by %v; Redis: %s, fresh per section\n",
		strings.Join(s.only, ","), s.runs, s.runTimeout, redisBin)
	if slices.Contains(s.only, "unary") {
		fmt.Fprintf(w, "unary (goals 1, 4): %d B echo, closed loop at c=%v, %d calls (%d at c=%d) + a tenth as many warm-up (at least %d) per run; rpr server (Concurrency %d) and gRPC-go server each in a child process, callers in this one;\n",
			unaryPayload, unaryLevels, s.calls, s.callsBusy, goal1Level, s.warmup, compare.ChildServerConcurrency)
		fmt.Fprintf(w, "  rpr callers spread over %d client instances (1 at c=1), each its own Redis pool; gRPC callers share one ClientConn over loopback TCP;\n", s.instances)
		fmt.Fprintf(w, "  at c=128 also the plain Streams RPC (the floor) over as many client instances, its server in a child process running each request on a goroutine of its own (just before rpr) and running a batch one request after another (after gRPC)\n")
	}
	if slices.Contains(s.only, "async") {
		fmt.Fprintf(w, "async (goal 2): %d tasks from 16 producers end to end, rpr then asynq in each of %d runs, each on a redis-server of its own\n", s.asyncTasks, s.asyncRuns)
	}
	if slices.Contains(s.only, "scale") {
		fmt.Fprintf(w, "scale (goal 3): %d B echo at c=%v, rpr with %v client instances, the plain Streams RPC (the floor) with %v, then one with concurrent handlers and its answers pushed, %d calls + %d warm-up per run\n",
			unaryPayload, scaleLevels, scaleInstances, plainInstances, s.calls, s.warmup)
	}
	if slices.Contains(s.only, "large") {
		fmt.Fprintf(w, "large (goal 5): 64 KiB echo × %d calls, 1 MiB echo × %d calls (warm-up a tenth, at least 2), c=%d, %d rpr client instances\n",
			s.calls64K, s.calls1M, largeConcurrency, instancesFor(largeConcurrency, s.instances))
	}
	if slices.Contains(s.only, "idle") {
		fmt.Fprintf(w, "idle (goal 6): 1 then %d idle rpr clients (no calls), 1 then %d idle servers, %d clients after one call; settle %v, commands counted over %v\n",
			idleClients, idleServers, idleClients, s.settle, s.idleWindow)
	}
}
