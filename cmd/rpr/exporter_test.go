package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	ordersv1 "github.com/rprtunnel/rpr/gen/examples/orders/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// syncBuffer is a bytes.Buffer that a command's goroutines may write while
// the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// exporterRun is one `rpr exporter` running in-process until stop.
type exporterRun struct {
	url         string // of /metrics, as it printed it
	out, errOut *syncBuffer
	stop        func() error // ends it as SIGINT would, and returns its error
}

// startExporter runs `rpr exporter --redis URL --listen 127.0.0.1:0 ARGS...`
// and waits for the URL it serves on; the test's end stops it.
func startExporter(t *testing.T, rs *redistest.Server, args ...string) *exporterRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	run := &exporterRun{out: &syncBuffer{}, errOut: &syncBuffer{}}
	root := newRootCommand()
	root.SetOut(run.out)
	root.SetErr(run.errOut)
	root.SetArgs(append([]string{"exporter", "--redis", rs.URL(), "--listen", "127.0.0.1:0"}, args...))
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	var once sync.Once
	var err error
	run.stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = run.stop() })

	serving := regexp.MustCompile(`^rpr exporter: serving (http://\S+/metrics): `)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := serving.FindStringSubmatch(run.out.String()); m != nil {
			run.url = m[1]
			return run
		}
		select {
		case err := <-done:
			t.Fatalf("rpr exporter ended before serving: %v\nstdout: %s\nstderr: %s", err, run.out, run.errOut)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("rpr exporter printed no URL:\n%s", run.out)
		}
	}
}

// scrape returns the text of one GET of the exporter's /metrics.
func (r *exporterRun) scrape(t *testing.T) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v\n%s", r.url, resp.Status, err, body)
	}
	return string(body)
}

// sample returns the value of the first series of metric whose labels
// include all of labels ("" when there is none).
func sample(text, metric string, labels ...string) string {
	for line := range strings.SplitSeq(text, "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || name != metric {
			continue
		}
		set, value, _ := strings.Cut(rest, "} ")
		matches := true
		for _, l := range labels {
			matches = matches && strings.Contains(","+set+",", ","+l+",")
		}
		if matches {
			return value
		}
	}
	return ""
}

// TestExporterServesQueueGauges: the queue gauges that the server's own
// Prometheus endpoint used to serve, now served once for the deployment by
// rpr exporter: per lane, and per service without a lane; then it stops
// as on SIGINT, with exit status 0.
func TestExporterServesQueueGauges(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "exporter-w1")
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := greeterv1.NewGreeterClient(client).SayHello(context.Background(), &greeterv1.SayHelloRequest{}); tunnel.CodeOf(err) != tunnel.InvalidArgument {
		t.Fatalf("SayHello with no name: %v; want INVALID_ARGUMENT", err)
	}

	run := startExporter(t, rs)
	text := run.scrape(t)
	greeter := `rpc_service="` + greeterService + `"`
	for _, want := range []struct {
		metric string
		labels []string
	}{
		{"rpr_queue_length", []string{greeter, `rpr_lane="default"`}}, // queue gauges are per lane
		{"rpr_queue_lag", []string{greeter, `rpr_lane="default"`}},
		{"rpr_queue_pending", []string{greeter, `rpr_lane="default"`}},
		{"rpr_queue_oldest_pending_age_seconds", []string{greeter, `rpr_lane="default"`}},
		{"rpr_queue_consumers", []string{greeter, `rpr_lane="default"`}},
		{"rpr_queue_retrying", []string{greeter, `rpr_lane="default"`}},
		{"rpr_queue_backlog", []string{greeter, `rpr_lane="default"`}},
		{"rpr_workers_live", []string{greeter, `rpr_lane="default"`}},
		{"rpr_queue_capacity", []string{greeter}},
		{"rpr_dlq_length", []string{greeter}},
	} {
		if sample(text, want.metric, want.labels...) == "" {
			t.Errorf("/metrics lacks %s{%s}", want.metric, strings.Join(want.labels, ","))
		}
	}
	if v := sample(text, "rpr_workers_live", greeter); v != "1" {
		t.Errorf("rpr_workers_live of the Greeter = %q; want 1", v)
	}
	// The dead letters and the cap are the service's, not a lane's.
	for line := range strings.SplitSeq(text, "\n") {
		if (strings.HasPrefix(line, "rpr_dlq_length{") || strings.HasPrefix(line, "rpr_queue_capacity{")) && strings.Contains(line, "rpr_lane") {
			t.Errorf("a per-service gauge has a lane: %s", line)
		}
	}
	// The server's call metrics are its own MeterProvider's, not these.
	if strings.Contains(text, "rpr_server_call_duration") {
		t.Error("/metrics has server call metrics")
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}

	if err := run.stop(); err != nil {
		t.Errorf("stopped: %v; want nil (exit status 0)", err)
	}
	if !strings.HasSuffix(run.out.String(), "rpr exporter: stopped\n") {
		t.Errorf("stdout %q; want it to end with the stop", run.out)
	}
}

// TestExporterPinnedServices: with --service, only those services are
// exported, also one that has published no schema (its cap is then the
// default).
func TestExporterPinnedServices(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "exporter-w2")
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	orders := ordersv1.NewOrdersClient(client)
	for range 3 { // no server of Orders runs: they wait
		if _, err := orders.ShipOrder(context.Background(), &ordersv1.ShipOrderRequest{OrderId: "o", Sku: "BOOK", Quantity: 1}); err != nil {
			t.Fatal(err)
		}
	}

	run := startExporter(t, rs, "--service", ordersService)
	if !strings.Contains(run.out.String(), "the queue gauges of "+ordersService+" in ") {
		t.Errorf("stdout %q does not name the pinned service", run.out)
	}
	text := run.scrape(t)
	svc := `rpc_service="` + ordersService + `"`
	for metric, want := range map[string]string{"rpr_queue_length": "3", "rpr_queue_lag": "3", "rpr_queue_backlog": "3", "rpr_workers_live": "0"} {
		if got := sample(text, metric, svc, `rpr_lane="default"`); got != want {
			t.Errorf("%s{%s} = %q; want %s", metric, svc, got, want)
		}
	}
	if got := sample(text, "rpr_queue_capacity", svc); got != "100000" {
		t.Errorf("rpr_queue_capacity{%s} = %q; want the default, 100000", svc, got)
	}
	if strings.Contains(text, greeterService) {
		t.Errorf("/metrics has the Greeter, which --service leaves out:\n%s", text)
	}
}

// TestExporterRedisDown: a scrape while Redis is down still answers, with
// no queue figures and the error counted and logged; the exporter carries
// on and stops cleanly.
func TestExporterRedisDown(t *testing.T) {
	rs := redistest.Start(t)
	run := startExporter(t, rs, "--service", ordersService)
	if text := run.scrape(t); sample(text, "rpr_queue_length", `rpc_service="`+ordersService+`"`) != "0" || !strings.Contains(text, "\nrpr_exporter_collect_errors_total 0\n") {
		t.Fatalf("/metrics with Redis up:\n%s", text)
	}
	rs.Stop()
	text := run.scrape(t)
	if strings.Contains(text, "rpr_queue_length{") || strings.Contains(text, "\nrpr_exporter_collect_errors_total 0\n") || !strings.Contains(text, "\nrpr_exporter_collect_errors_total ") {
		t.Errorf("/metrics with Redis down: want no queue gauges and errors counted:\n%s", text)
	}
	if !strings.Contains(run.errOut.String(), "rpr exporter: ") || !strings.Contains(run.errOut.String(), ordersService) {
		t.Errorf("stderr %q; want the failed read of %s logged", run.errOut, ordersService)
	}
	if err := run.stop(); err != nil {
		t.Errorf("stopped: %v; want nil (exit status 0)", err)
	}
}

func TestExporterBadInput(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	rs := redistest.Start(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "9464"}, `--listen "9464": want host:port or :port, e.g. --listen :9464`},
		{[]string{"--listen", taken.Addr().String()}, "--listen " + `"` + taken.Addr().String() + `"`},
		{[]string{"--service", greeterService + "/SayHello"}, "names a method"},
		{[]string{"extra"}, "usage: rpr exporter"},
		{[]string{"--bogus"}, "unknown flag: --bogus (see rpr exporter --help)"},
	} {
		res := runCLI(t, "", append([]string{"exporter", "--redis", rs.URL()}, tc.args...)...)
		if res.code != 2 || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("rpr exporter %s: want exit 2 and %q; got\n%s", strings.Join(tc.args, " "), tc.want, res)
		}
	}
	if res := runCLI(t, "", "exporter", "--redis", "redis://127.0.0.1:1/0", "--listen", "127.0.0.1:0"); res.code != 2 {
		t.Errorf("unreachable Redis: want exit 2; got\n%s", res)
	}
}

func TestMetricsURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:9464": "http://127.0.0.1:9464/metrics",
		"[::]:9464":      "http://localhost:9464/metrics",
		"0.0.0.0:9464":   "http://localhost:9464/metrics",
		"[::1]:80":       "http://[::1]:80/metrics",
	} {
		tcp, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := metricsURL(tcp); got != want {
			t.Errorf("metricsURL(%s) = %q; want %q", addr, got, want)
		}
	}
}
