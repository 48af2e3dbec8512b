// Command forwardcompare measures what tunnelling an existing service
// through rpr costs, in one run: the same upstream reached directly,
// through a plain httputil.ReverseProxy and through rpr ingress ->
// redis-server -> rpr egress, and prints one table of requests/s, p50 and
// p99, Redis commands and CPU per request, and the ratios.
//
//   - HTTP: a GET answered with -size bytes (default 128), and with
//     -post a POST of that many bytes answered the same way, to a
//     net/http upstream in this process on loopback: directly,
//     through httputil.ReverseProxy (in this process, on loopback), and
//     through rpr;
//   - gRPC: a unary echo of -size bytes to a gRPC-go upstream: directly,
//     and through rpr ingress's HTTP/2 listener (--listen) and its gRPC
//     one (--grpc-listen).
//
// rpr ingress and rpr egress run as processes of their own, built from
// this checkout's cmd/rpr (or -rpr), with --redis on a redis-server this
// program starts on a free loopback port; the routes are set with rpr
// upstreams set; all are stopped by PID at the end. Run it from bench/:
//
//	go run ./forwardcompare
//	go run ./forwardcompare -post 1024 -by-command
//	go run ./forwardcompare -requests 5000 -concurrency 1,16 -grpc=false
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"

	"google.golang.org/grpc"

	"github.com/rprtunnel/rpr/bench/internal/compare"
)

func main() {
	requests := flag.Int("requests", 20_000, "measured requests per system, workload and concurrency level")
	levels := flag.String("concurrency", "1,16,128", "comma-separated concurrency levels (callers, each with one request in flight)")
	warmup := flag.Int("warmup", 1000, "requests made and not measured before each run")
	size := flag.Int("size", 128, "bytes of the HTTP response body, and of the gRPC echo each way")
	post := flag.Int("post", 0, "also measure an HTTP POST of this many bytes (answered with -size bytes), e.g. -post 1024")
	withHTTP := flag.Bool("http", true, "measure HTTP")
	withGRPC := flag.Bool("grpc", true, "measure gRPC")
	byCommand := flag.Bool("by-command", false, "also print, per rpr run, the Redis commands per request by command")
	rprBin := flag.String("rpr", "", "rpr binary (default: $RPR_BIN, else built from ../cmd/rpr)")
	redisServer := flag.String("redis-server", "", "redis-server binary (default: $RPR_REDIS_SERVER, else the one on PATH)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./forwardcompare [flags]   (from bench/)\n\n"+
			"An upstream reached directly, through httputil.ReverseProxy and through rpr ingress -> Redis -> rpr egress.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	conc, err := compare.ParseLevels(*levels)
	switch {
	case err != nil:
		usageError("-concurrency %q: %v; e.g. -concurrency 1,16,128", *levels, err)
	case *requests < 1:
		usageError("-requests %d: want at least 1, e.g. -requests 20000", *requests)
	case *warmup < 0:
		usageError("-warmup %d: want 0 or more requests, e.g. -warmup 1000", *warmup)
	case *size < 0 || *size > 1<<20:
		usageError("-size %d: want 0 to 1048576 bytes, e.g. -size 128", *size)
	case *post < 0 || *post > 1<<20:
		usageError("-post %d: want 0 to 1048576 bytes, e.g. -post 1024", *post)
	case !*withHTTP && !*withGRPC:
		usageError("-http=false -grpc=false: nothing to measure; leave one of them on")
	case flag.NArg() > 0:
		usageError("unexpected argument %q: everything is a flag, e.g. -requests 5000", flag.Arg(0))
	}
	if *rprBin == "" {
		*rprBin = os.Getenv("RPR_BIN")
	}
	compare.RunMain("forwardcompare", func(ctx context.Context) error {
		return run(ctx, os.Stdout, os.Stderr, config{
			requests: *requests, levels: conc, warmup: *warmup, size: *size, post: *post,
			http: *withHTTP, grpc: *withGRPC, byCommand: *byCommand, rprBin: *rprBin, redisServer: *redisServer,
		})
	})
}

func usageError(format string, args ...any) {
	compare.UsageError("forwardcompare", format, args...)
}

type config struct {
	requests, warmup, size, post int
	levels                       []int
	http, grpc, byCommand        bool
	rprBin, redisServer          string
}

// The roles a system plays in a workload: the ratio columns divide by the
// direct row and the reverse-proxy row.
type role int

const (
	direct role = iota
	proxy
	viaRPR
)

// system is one way to the upstream, in one workload.
type system struct {
	name  string
	role  role
	start func() (compare.Echoer, error)
	// skip says why the system is not measured (shown as a note); warn,
	// why it could not be (shown as a warning).
	skip, warn string
}

// workload is a kind of request and the systems that carry it.
type workload struct {
	name    string
	payload []byte // what Call gets: the POST body, the gRPC echo
	systems []system
}

// row is one system's result at one concurrency level.
type row struct {
	workload    string
	concurrency int
	system      string
	role        role
	res         compare.Result
	commands    []commandCount // Redis's commands by name, rpr rows
	// skip or warn: not measured, and why (see system).
	skip, warn string
}

func run(ctx context.Context, out, log io.Writer, cfg config) error {
	loadBefore := loadAverage()
	rs, err := compare.StartRedis(cfg.redisServer)
	if err != nil {
		return err
	}
	defer rs.Stop()
	dir, err := os.MkdirTemp("", "forwardcompare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := cfg.rprBin
	if bin == "" {
		if bin, err = buildRPR(ctx, dir, log); err != nil {
			return err
		}
	}
	ups, err := startUpstreams(cfg.size)
	if err != nil {
		return err
	}
	defer ups.close()
	// The route lets the egress have as many requests in flight to the
	// upstream as the load makes, so that its bound (64 by default) does
	// not queue the highest level.
	routeConcurrency := max(slices.Max(cfg.levels), 64)
	dep, err := startDeployment(ctx, bin, dir, rs.URL(), ups, routeConcurrency, cfg.grpc, log)
	if err != nil {
		return err
	}
	defer dep.stop()

	var workloads []workload
	if cfg.http {
		workloads = httpWorkloads(cfg, ups, dep)
	}
	if cfg.grpc {
		workloads = append(workloads, grpcWorkload(ctx, cfg, ups, dep))
	}
	var rows []row
	for _, w := range workloads {
		for _, c := range cfg.levels {
			for _, s := range w.systems {
				if ctx.Err() != nil {
					break
				}
				r := row{workload: w.name, concurrency: c, system: s.name, role: s.role, skip: s.skip, warn: s.warn}
				if !r.skipped() {
					fmt.Fprintf(log, "%s, concurrency %d, %s ...", w.name, c, s.name)
					if r.res, err = measure(ctx, s.start, w.payload, c, cfg); err != nil {
						return fmt.Errorf("%s, concurrency %d, %s: %w", w.name, c, s.name, err)
					}
					if s.role == viaRPR {
						r.commands = dep.byCommand()
					}
					fmt.Fprintf(log, " %.0f/s\n", r.res.CallsPerSecond())
				}
				rows = append(rows, r)
			}
		}
	}

	fmt.Fprintf(out, "forwarding, %d requests per run after %d warm-up; %s %s/%s, GOMAXPROCS %d, %d CPUs",
		cfg.requests, cfg.warmup, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU())
	if loadBefore != "" {
		// Everything measured shares the machine: say how busy it was
		// before this program made it busier.
		fmt.Fprintf(out, ", load average %s at the start", loadBefore)
	}
	fmt.Fprintln(out)
	if cfg.http {
		fmt.Fprintf(out, "HTTP: a net/http upstream in this process on loopback answers %d B; a client in this process, HTTP/1.1 keep-alive\n", cfg.size)
		fmt.Fprintf(out, "      proxy: httputil.ReverseProxy in this process on loopback (%d idle connections per host, as rpr egress)\n", idlePerHost)
	}
	if cfg.grpc {
		fmt.Fprintf(out, "gRPC: a unary echo of %d B each way, gRPC-go %s upstream and client in this process, loopback, no TLS\n", cfg.size, grpc.Version)
	}
	fmt.Fprintf(out, "rpr:  rpr ingress and rpr egress, processes of their own, through redis-server %s on loopback; routes: rpr upstreams set --concurrency %d\n\n", rs.Version, routeConcurrency)
	writeTable(out, rows)
	fmt.Fprintln(out, "\ncmds/req: commands redis-server executed per request (INFO commandstats, inside Lua scripts included; the rpr processes' background work included).")
	fmt.Fprintln(out, "cpu µs/req: user+system CPU per request of this process (client, upstream, proxy) and, for rpr, of rpr ingress and rpr egress (/proc/<pid>/stat) and redis-server (INFO cpu).")
	fmt.Fprintln(out, "÷direct, ÷proxy: the row's figure over the direct (reverse-proxy) row's, same workload and concurrency; req/s below 1 means slower, p50 and cpu above 1 mean it takes more.")
	notes(out, rows)
	if cfg.byCommand {
		writeCommands(out, rows)
	}
	if ctx.Err() != nil {
		return errors.New("interrupted: the table has the runs finished before Ctrl-C")
	}
	return nil
}

func httpWorkloads(cfg config, ups *upstreams, dep *deployment) []workload {
	systems := func(post bool) []system {
		start := func(addr string, d *deployment) func() (compare.Echoer, error) {
			return func() (compare.Echoer, error) { return newHTTPSystem(addr, post, cfg.size, d), nil }
		}
		return []system{
			{name: "direct", role: direct, start: start(ups.httpAddr, nil)},
			{name: "httputil.ReverseProxy", role: proxy, start: start(ups.proxyAddr, nil)},
			{name: "rpr ingress->egress", role: viaRPR, start: start(dep.httpAddr, dep)},
		}
	}
	out := []workload{{name: fmt.Sprintf("HTTP GET, %s back", bytesName(cfg.size)), systems: systems(false)}}
	if cfg.post > 0 {
		out = append(out, workload{name: fmt.Sprintf("HTTP POST %s, %s back", bytesName(cfg.post), bytesName(cfg.size)), payload: payload(cfg.post), systems: systems(true)})
	}
	return out
}

func grpcWorkload(ctx context.Context, cfg config, ups *upstreams, dep *deployment) workload {
	start := func(addr string, d *deployment) func() (compare.Echoer, error) {
		return func() (compare.Echoer, error) { return newGRPCSystem(addr, d) }
	}
	h2 := system{name: "rpr ingress --listen (h2c)", role: viaRPR, start: start(dep.httpAddr, dep)}
	h2.skip, h2.warn = probeGRPC(ctx, dep.httpAddr)
	alone := system{name: "rpr ingress --grpc-listen", role: viaRPR, start: start(dep.grpcAddr, dep), skip: dep.grpcListenSkip}
	if dep.grpcAddr != "" {
		alone.skip, alone.warn = probeGRPC(ctx, dep.grpcAddr)
	}
	return workload{
		name:    fmt.Sprintf("gRPC unary echo, %s", bytesName(cfg.size)),
		payload: payload(cfg.size),
		systems: []system{{name: "direct", role: direct, start: start(ups.grpcAddr, nil)}, h2, alone},
	}
}

func measure(ctx context.Context, start func() (compare.Echoer, error), payload []byte, concurrency int, cfg config) (compare.Result, error) {
	sys, err := start()
	if err != nil {
		return compare.Result{}, err
	}
	defer sys.Close()
	return compare.Measure(ctx, sys, payload, concurrency, cfg.requests, cfg.warmup)
}

func bytesName(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d B", n)
}

// loadAverage is the 1-minute load average of /proc/loadavg, "" where
// there is none.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func (r *row) skipped() bool { return r.skip != "" || r.warn != "" }
