package main

// rpr between the client and the upstreams: the routes, rpr egress and rpr
// ingress, and the figures of Redis and of the two processes.

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/bench/internal/compare"
	"github.com/rprtunnel/rpr/internal/redisinfo"
)

// deployment is rpr between the client and the upstreams: rpr egress and
// rpr ingress, processes of their own, through one redis-server.
type deployment struct {
	bin, dir, redisURL string
	admin              redis.UniversalClient
	egress, ingress    *proc
	// httpAddr is the ingress's --listen (HTTP/1.1, h2c, gRPC over h2c);
	// grpcAddr its --grpc-listen, "" when it runs without one (why in
	// grpcListenSkip).
	httpAddr, grpcAddr string
	grpcListenSkip     string
	samples            []map[string]int64 // INFO commandstats calls, the last two
}

// startDeployment sets the routes to ups with rpr upstreams set, then
// starts rpr egress and rpr ingress (with --grpc-listen when withGRPC)
// and waits until a request goes through.
func startDeployment(ctx context.Context, bin, dir, redisURL string, ups *upstreams, routeConcurrency int, withGRPC bool, log io.Writer) (_ *deployment, err error) {
	d := &deployment{bin: bin, dir: dir, redisURL: redisURL}
	defer func() {
		if err != nil {
			d.stop()
		}
	}()
	conc := fmt.Sprint(routeConcurrency)
	if _, err := rprCLI(ctx, bin, "upstreams", "set", "bench", "--path", "/", "--upstream", "http://"+ups.httpAddr,
		"--concurrency", conc, "--wait", "0", "--redis", redisURL); err != nil {
		return nil, err
	}
	if withGRPC {
		if _, err := rprCLI(ctx, bin, "upstreams", "set", "echo", "--path", strings.TrimSuffix(compare.GRPCEchoMethod, "Echo"),
			"--upstream", "grpc://"+ups.grpcAddr, "--concurrency", conc, "--wait", "0", "--redis", redisURL); err != nil {
			return nil, err
		}
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, err
	}
	d.admin = redis.NewClient(opts)

	fmt.Fprintln(log, "starting rpr egress and rpr ingress ...")
	if d.egress, err = startProc(dir, "egress", "rpr egress: worker", bin, "egress", "--redis", redisURL); err != nil {
		return nil, err
	}
	if _, err := d.egress.waitReady(15 * time.Second); err != nil {
		return nil, err
	}
	if err := d.startIngress(ctx, withGRPC); err != nil {
		return nil, err
	}
	if withGRPC && d.grpcAddr == "" {
		// Without a working --grpc-listen the ingress stops serving at
		// once (the passthrough not written yet): run one without.
		fmt.Fprintln(log, "rpr ingress --grpc-listen stopped at start; starting one without --grpc-listen")
		if err := d.startIngress(ctx, false); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// startIngress starts rpr ingress on free loopback ports and waits until
// an HTTP request goes through it to the upstream. With grpcListen, an
// ingress that stops at once is no error: d.grpcAddr stays "" and
// d.grpcListenSkip says why.
func (d *deployment) startIngress(ctx context.Context, grpcListen bool) error {
	args := []string{"ingress", "--redis", d.redisURL, "--listen", "127.0.0.1:0"}
	name := "ingress"
	if grpcListen {
		args = append(args, "--grpc-listen", "127.0.0.1:0")
		name = "ingress-grpc-listen"
	}
	p, err := startProc(d.dir, name, "rpr ingress: taking", d.bin, args...)
	if err != nil {
		return err
	}
	d.ingress = p
	line, err := p.waitReady(15 * time.Second)
	if err != nil {
		return err
	}
	if d.httpAddr, err = field(line, " on http://"); err != nil {
		return err
	}
	grpcAddr := ""
	if grpcListen {
		if grpcAddr, err = field(line, "gRPC alone on "); err != nil {
			return err
		}
	}
	probe := newHTTPSystem(d.httpAddr, false, -1, nil)
	defer probe.Close()
	var last error
	for deadline := time.Now().Add(15 * time.Second); p.alive(); {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = probe.probe(callCtx)
		cancel()
		if last == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("no request went through rpr ingress and egress within 15s: %w\ningress: %s\negress: %s", last, p.logTail(), d.egress.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	select { // an ingress whose --grpc-listen fails stops right after starting
	case <-p.exited:
	case <-time.After(300 * time.Millisecond):
	}
	if !p.alive() {
		if !grpcListen {
			return fmt.Errorf("rpr ingress stopped: %s", p.logTail())
		}
		d.grpcListenSkip = "rpr ingress --grpc-listen stopped at start: " + lastLine(p.logTail())
		return nil
	}
	d.grpcAddr = grpcAddr
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// redisFigures samples Redis when d is not nil. compare.Measure calls it
// right before and right after the measured requests: d keeps the last
// two samples of INFO commandstats too, for byCommand.
func (d *deployment) redisFigures(ctx context.Context) (redisinfo.Sample, bool, error) {
	if d == nil {
		return redisinfo.Sample{}, false, nil
	}
	f, err := redisinfo.Read(ctx, d.admin)
	if err != nil {
		return f, true, err
	}
	info, err := d.admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return f, true, err
	}
	calls := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		calls[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	d.samples = append(d.samples[max(len(d.samples)-1, 0):], calls)
	return f, true, nil
}

// byCommand is the commands Redis executed between the last two
// redisFigures, by name, most first.
func (d *deployment) byCommand() []commandCount {
	if len(d.samples) < 2 {
		return nil
	}
	var out []commandCount
	for name, n := range d.samples[1] {
		if n -= d.samples[0][name]; n > 0 {
			out = append(out, commandCount{name, n})
		}
	}
	slices.SortFunc(out, func(a, b commandCount) int { return cmp.Or(cmp.Compare(b.calls, a.calls), cmp.Compare(a.name, b.name)) })
	return out
}

type commandCount struct {
	name  string
	calls int64
}

// cpu is the CPU of rpr ingress and rpr egress so far, in that order; nil
// when d is nil.
func (d *deployment) cpu() ([]time.Duration, error) {
	if d == nil {
		return nil, nil
	}
	var out []time.Duration
	for _, p := range []*proc{d.ingress, d.egress} {
		if !p.alive() {
			return nil, fmt.Errorf("%s stopped: %s", p.name, lastLine(p.logTail()))
		}
		c, err := p.cpu()
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// stop ends the ingress, then the egress, by their PIDs.
func (d *deployment) stop() {
	for _, p := range []*proc{d.ingress, d.egress} {
		if p != nil {
			p.stop()
		}
	}
	if d.admin != nil {
		_ = d.admin.Close()
	}
}
