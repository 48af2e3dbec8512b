package main

// rpr egress: the far side of a tunnel for existing services. It serves
// rpr.tunnel.v1.HTTP and rpr.tunnel.v1.GRPC by forwarding to the
// upstreams of the table (rpr upstreams), and only to them.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/egress"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	"github.com/rprtunnel/rpr/tunnel"
)

// tunnelMessageBytes bounds one tunnelled message on both sides: the
// largest body a route may allow, and room for its headers.
const tunnelMessageBytes = upstream.MaxBodyLimit + 1<<20

func newEgressCommand() *cobra.Command {
	var rf redisFlags
	var routesFile, lane, workerID, caFile, trustFile string
	var concurrency int
	var retention time.Duration
	var routeFlags []string
	cmd := &cobra.Command{
		Use:   "egress",
		Short: "Forward tunnelled HTTP and gRPC traffic to the upstreams of the route table",
		Long: `egress runs on the side that can reach the services: it takes the requests
rpr ingress sends through Redis and forwards each to the upstream its route
names (rpr upstreams set), answering with the upstream's response. It forwards
to nothing else: no part of a request names an address.

Requests carry X-Forwarded-For, X-Forwarded-Host, X-Forwarded-Proto, the
caller's trace context (traceparent) and X-Rpr-Request-Id; the caller's
deadline bounds the upstream request. A route's concurrency bounds the
requests one egress has in flight to its upstream.

--route PATH=URL sets a route as it starts (rpr upstreams set does the same
from anywhere): the requests under PATH go to URL; the route is named after
PATH ("/inventory" -> inventory; "/" -> root). A grpc:// or grpcs:// URL makes
it a gRPC route, whose PATH is /package.Service/.

Run as many as you like (each is an rpr worker: a crashed one's requests are
taken over); --lane serves only the routes of that lane. It stops on SIGINT or
SIGTERM after finishing the requests in flight.

--retention keeps a record of each synchronous request it answers (status,
worker, times, size; never a body) for that long, so that rpr trace finds it
by its X-Rpr-Request-Id after it finished: about 320 bytes of Redis memory
per request while kept (tunnel.ServerOptions.Retention). Async requests are
traceable without it.`,
		Example: `  rpr egress --redis redis://hub.internal:6379/0
  rpr egress --redis redis://hub.internal:6379/0 --route /inventory=http://10.1.0.5:8080
  rpr egress --redis redis://hub.internal:6379/0 --route /helloworld.Greeter/=grpc://10.1.0.6:9090
  rpr egress --redis redis://hub.internal:6379/0 --lane site-b --retention 15m
  rpr egress --redis redis://hub.internal:6379/0 --routes-file routes.json`,
		Args: usageArgs(0, 0, "rpr egress [--redis URL] [--lane LANE] [--routes-file FILE]"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if concurrency < 1 {
				return badInput(fmt.Errorf("--concurrency %d: want at least 1, e.g. --concurrency 256", concurrency))
			}
			if retention < 0 {
				return badInput(fmt.Errorf("--retention %v: must not be negative; use e.g. --retention 15m, or 0 to keep nothing", retention))
			}
			tlsConfig, err := upstreamTLS(caFile)
			if err != nil {
				return badInput(err)
			}
			routes, err := parseRouteFlags(routeFlags, lane)
			if err != nil {
				return badInput(err)
			}
			if len(routes) > 0 && routesFile != "" {
				return badInput(errors.New("--route writes to Redis's table, --routes-file replaces it: give one or the other"))
			}
			return runEgress(cmd, rf, egressConfig{routesFile: routesFile, lane: lane, workerID: workerID, concurrency: concurrency, retention: retention, tls: tlsConfig, routes: routes, trustFile: trustFile})
		},
	}
	rf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&routesFile, "routes-file", "", `a static route table instead of Redis's: {"http": {"name": {"path_prefix": "/api", "upstream": "http://host:port"}}, "grpc": {...}}`)
	f.StringVar(&lane, "lane", "", "serve only the routes of this lane (their --lane); default: the default lane")
	f.StringVar(&workerID, "worker-id", "", "this egress's worker id (default: host-pid)")
	f.IntVar(&concurrency, "concurrency", 256, "requests forwarded at once, over all upstreams")
	f.DurationVar(&retention, "retention", 0, "keep a record of each synchronous request answered for this long, for rpr trace (0: none)")
	f.StringArrayVar(&routeFlags, "route", nil, "set route PATH=URL in Redis's table at start (repeatable), e.g. --route /inventory=http://10.1.0.5:8080")
	f.StringVar(&caFile, "upstream-ca", "", "PEM file of the CAs that sign https:// and grpcs:// upstreams' certificates (default: the system's)")
	f.StringVar(&trustFile, "trust", "", "take only requests signed by the callers this file lists, one \"CALLER SECRET [METHOD...]\" per line (rpr keys new CALLER prints one; ingress --caller signs)")
	return cmd
}

type egressConfig struct {
	routesFile, lane, workerID, trustFile string
	concurrency                           int
	retention                             time.Duration
	tls                                   *tls.Config
	routes                                []kindRoute
}

// kindRoute is a route of a --route flag and the table it goes in.
type kindRoute struct {
	kind  upstream.Kind
	route upstream.Route
}

// parseRouteFlags reads --route PATH=URL flags; their routes serve lane.
func parseRouteFlags(flags []string, lane string) ([]kindRoute, error) {
	var out []kindRoute
	for _, f := range flags {
		path, target, ok := strings.Cut(f, "=")
		if !ok || path == "" || target == "" {
			return nil, fmt.Errorf("--route %q: want PATH=URL, e.g. --route /inventory=http://10.1.0.5:8080", f)
		}
		name := strings.ReplaceAll(strings.Trim(path, "/"), "/", "-")
		if name == "" {
			name = "root"
		}
		kind := upstream.KindOf(target)
		r := upstream.Route{Name: name, PathPrefix: path, Upstream: target, Lane: lane}
		if err := r.Check(kind); err != nil {
			return nil, fmt.Errorf("--route %q: %w", f, err)
		}
		out = append(out, kindRoute{kind, r})
	}
	return out, nil
}

func runEgress(cmd *cobra.Command, rf redisFlags, cfg egressConfig) error {
	ctx := cmd.Context()
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	// A long-running process: go-redis's own lines join its structured log.
	redis.SetLogger(tunnel.NewRedisLogger(log))
	openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rdb, err := rf.open(openCtx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	var trust *tunnel.Trust
	if cfg.trustFile != "" {
		if trust, err = readTrustFile(cfg.trustFile); err != nil {
			return badInput(err)
		}
	}
	srv, err := tunnel.NewServer(rdb, tunnel.ServerOptions{
		Prefix: rf.prefix, WorkerID: cfg.workerID, Lane: cfg.lane, Concurrency: cfg.concurrency,
		MaxRequestBytes: tunnelMessageBytes, Logger: log, Retention: cfg.retention, Trust: trust,
	})
	if err != nil {
		return badInput(err)
	}
	for _, kr := range cfg.routes {
		if _, err := upstream.NewStore(rdb, rf.prefix, kr.kind).Set(openCtx, kr.route); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "rpr egress: route %s (%s): %s -> %s\n", kr.route.Name, kr.kind, describeMatch(kr.route), describeTarget(kr.route))
	}
	tables, err := openTables(openCtx, rdb, rf.prefix, cfg.routesFile, srv.WorkerID(), log)
	if err != nil {
		return err
	}
	e, err := egress.Register(srv, egress.Options{HTTPRoutes: tables.http, GRPCRoutes: tables.grpc, Log: log, TLS: cfg.tls})
	if err != nil {
		return err
	}
	defer e.Close()
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	tables.run(runCtx, &wg)
	defer wg.Wait()
	defer stop()
	h, g := tables.http(), tables.grpc()
	fmt.Fprintf(cmd.OutOrStdout(), "rpr egress: worker %s forwarding %s and %s (lane %s) from %s: %s, %s (%s)\n",
		srv.WorkerID(), upstream.HTTPService, upstream.GRPCService, laneName(cfg.lane), tunnel.RedactURL(rf.url),
		count(h.Len(), "HTTP route"), count(g.Len(), "gRPC route"), tables.source)
	if err := srv.Serve(ctx); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	fmt.Fprintln(cmd.OutOrStdout(), "rpr egress: stopped")
	return nil
}

func laneName(lane string) string {
	if lane == "" {
		return tunnel.DefaultLane
	}
	return lane
}

// upstreamTLS is the TLS configuration for upstreams signed by the CAs of
// caFile; nil (the system's roots) without one.
func upstreamTLS(caFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--upstream-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--upstream-ca %s: no PEM certificate in it", caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
