package main

// rpr exporter: one process that serves the queue gauges of a whole
// deployment to Prometheus, so that worker replicas do not each export
// copies of the same cluster-wide figures. The gauges are the admin
// handle's (admin.Client.RegisterMetrics); this command brings the
// OpenTelemetry SDK, its Prometheus exporter and the HTTP server.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

const (
	// exporterListen is the address --listen defaults to: the port the
	// OpenTelemetry Prometheus exporter registers.
	exporterListen = ":9464"
	// exporterShutdown bounds the wait for scrapes in progress when the
	// exporter is told to stop.
	exporterShutdown = 5 * time.Second
	// exporterReadHeaderTimeout bounds how long a scraper may take to send
	// its request's headers.
	exporterReadHeaderTimeout = 5 * time.Second
	// exporterConnectTimeout bounds connecting to Redis at start.
	exporterConnectTimeout = 10 * time.Second
)

// exporterHelp is the operator's guide in short; docs/metrics.md has it in full.
const exporterHelp = `exporter serves, at /metrics in the Prometheus text format, the queue gauges
of every service of a deployment (one Redis and --prefix), read from Redis at
each scrape: what "rpr stats" shows. Run one for the whole deployment; workers
and clients export only their own call metrics, through their MeterProvider.

Per lane (labels rpc_service, rpr_lane; summed over a service's shards):
  rpr_queue_length                      requests in the streams: waiting plus being worked on
  rpr_queue_lag                         requests no worker has read yet
  rpr_queue_pending                     requests read by a worker, not yet acknowledged
  rpr_queue_oldest_pending_age_seconds  age of the oldest pending request
  rpr_queue_consumers                   consumers the "workers" groups know (live or not)
  rpr_queue_retrying                    async requests waiting for a retry or their time
  rpr_queue_backlog                     length + retrying: what the service's cap counts
  rpr_workers_live                      workers with a heartbeat in the last 5s
Per service (label rpc_service):
  rpr_dlq_length                        dead letters, all lanes and shards
  rpr_queue_capacity                    the backlog cap ((rpr.v1.service).max_backlog, else
                                        100000); clients refuse calls at 85% of it
And rpr_exporter_collect_errors_total: errors reading Redis (each logged on stderr).

Without --service it finds every service that published a schema or has
worker heartbeats, and looks for new ones every 30s. A scrape costs two
pipelined round trips per service and is bounded by 5s; a service that
cannot be read is left out of that scrape. Scrape every 15s to 60s, one job
with this one target:

  scrape_configs:
    - job_name: rpr
      scrape_interval: 30s
      static_configs:
        - targets: ["rpr-exporter.internal:9464"]

Alert before clients refuse calls:

  - alert: RprBacklogNearCap
    expr: sum by (rpc_service) (rpr_queue_backlog)
            / max by (rpc_service) (rpr_queue_capacity) > 0.7
    for: 5m

It prints the URL it serves on and stops on SIGINT or SIGTERM (exit status
0); bad flags, an unreachable Redis or an address it cannot listen on are
exit status 2.`

func newExporterCommand() *cobra.Command {
	var rf redisFlags
	var listen string
	var services []string
	cmd := &cobra.Command{
		Use:   "exporter",
		Short: "Serve the queue gauges of a whole deployment to Prometheus at /metrics",
		Long:  exporterHelp,
		Example: `  rpr exporter --redis redis://10.0.0.5:6379/0
  rpr exporter --listen 127.0.0.1:9464 --service examples.orders.v1.Orders --service examples.greeter.v1.Greeter`,
		Args: usageArgs(0, 0, "rpr exporter [--listen ADDR] [--service pkg.Svc ...], e.g. rpr exporter --listen :9464"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, svc := range services {
				if err := checkServiceName(svc, "rpr exporter --service examples.greeter.v1.Greeter"); err != nil {
					return err
				}
			}
			if _, _, err := net.SplitHostPort(listen); err != nil {
				return badInput(fmt.Errorf("--listen %q: want host:port or :port, e.g. --listen :9464 or --listen 127.0.0.1:9464", listen))
			}
			return runExporter(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), rf, listen, services)
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVar(&listen, "listen", exporterListen, "address to serve /metrics on: host:port, or :port for every interface")
	cmd.Flags().StringArrayVar(&services, "service", nil, "export only this service, pkg.Svc (repeatable; default: every service under --prefix)")
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return badInput(fmt.Errorf("%w (see %s --help)", err, c.CommandPath()))
	})
	return cmd
}

// runExporter serves the gauges until ctx ends, then stops the HTTP
// server (letting scrapes in progress finish), the gauges and the meter
// provider, and returns nil.
func runExporter(ctx context.Context, out, errOut io.Writer, rf redisFlags, listen string, services []string) error {
	openCtx, cancel := context.WithTimeout(ctx, exporterConnectTimeout)
	rdb, err := rf.open(openCtx)
	cancel()
	if err != nil {
		return err
	}
	defer rdb.Close()

	// Two registries, gathered in turn at each scrape, so that the errors
	// of collecting the gauges are counted in the same scrape.
	gauges, own := prometheus.NewRegistry(), prometheus.NewRegistry()
	collectErrors := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rpr_exporter_collect_errors_total",
		Help: "Errors the exporter met reading the queue gauges from Redis (each is also logged on stderr).",
	})
	own.MustRegister(collectErrors)
	// A service that cannot be read fails its part of a scrape only: the
	// SDK hands the error to otel.Handle, which would log it with the
	// standard logger. Count it, and say when and what instead. (The
	// handler is the process's: this command is all the process does.)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		collectErrors.Inc()
		fmt.Fprintf(errOut, "rpr exporter: %s: %v\n", time.Now().UTC().Format(time.RFC3339), err)
	}))
	exporter, err := otelprom.New(otelprom.WithRegisterer(gauges))
	if err != nil {
		return fmt.Errorf("the Prometheus exporter: %w", err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { _ = provider.Shutdown(context.WithoutCancel(ctx)) }()
	registration, err := rf.handle(rdb).RegisterMetrics(provider, admin.MetricsOptions{Services: services})
	if err != nil {
		return fmt.Errorf("register the queue gauges: %w", err)
	}
	defer func() { _ = registration.Unregister() }()

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return badInput(fmt.Errorf("--listen %q: %w", listen, err))
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{gauges, own}, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "rpr exporter: the queue gauges are at /metrics")
	})
	server := &http.Server{Handler: mux, ReadHeaderTimeout: exporterReadHeaderTimeout}
	served := make(chan error, 1)
	go func() { served <- server.Serve(ln) }()

	what := fmt.Sprintf("every service under prefix %q", rf.prefix)
	if len(services) > 0 {
		what = strings.Join(services, ", ")
	}
	fmt.Fprintf(out, "rpr exporter: serving %s: the queue gauges of %s in %s\n", metricsURL(ln.Addr()), what, tunnel.RedactURL(rf.url))

	select {
	case err := <-served:
		return fmt.Errorf("serve /metrics: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), exporterShutdown)
	defer cancel()
	if err := server.Shutdown(shutdownCtx); err != nil {
		_ = server.Close() // scrapes still running after the grace period
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve /metrics: %w", err)
	}
	fmt.Fprintln(out, "rpr exporter: stopped")
	return nil
}

// metricsURL is the URL of /metrics on the address the exporter listens
// on; an address of every interface (":9464") is shown as localhost.
func metricsURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String() + "/metrics"
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/metrics"
}
