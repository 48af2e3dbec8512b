package main

// rpr ingress: the near side of a tunnel for existing services. It takes
// HTTP requests and gRPC calls and sends them through rpr to rpr egress.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/ingress"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	"github.com/rprtunnel/rpr/tunnel"
)

// ingressShutdown bounds the wait for requests in flight when the ingress
// is told to stop.
const ingressShutdown = 10 * time.Second

func newIngressCommand() *cobra.Command {
	var rf redisFlags
	var cfg ingressConfig
	cmd := &cobra.Command{
		Use:   "ingress",
		Short: "Take HTTP and gRPC traffic and send it through rpr to rpr egress",
		Long: `ingress runs on the side that calls the services: it listens for HTTP
(HTTP/1.1 and cleartext HTTP/2) and gRPC, finds each request's route (rpr
upstreams set) and sends it through Redis to an rpr egress, which forwards it
to the upstream. The caller gets the upstream's answer, or:

  404  no route takes the request's host and path
  413  the body is over the route's --max-body
  429  a rate limit refused it (rpr limits), with Retry-After
  502  the upstream could not be reached or failed
  503  no egress is running, or the queue is full, with Retry-After
  504  the deadline passed (X-Rpr-Timeout: 5s, else the route's --timeout)

Failures carry X-Rpr-Outcome: "not executed" when rpr can prove the upstream
never got the request, else "may have executed"; every answer carries
X-Rpr-Request-Id (rpr trace ID). Rate limits (rpr limits set
rpr.tunnel.v1.HTTP ...) count each caller: its IP address, or the
--caller-header. Async routes answer 202 Accepted with
{"request_id", "idempotency_key"}; an Idempotency-Key header is the key. gRPC
calls of any service pass through unchanged, streaming ones too.

It listens on loopback unless --listen says otherwise, serves TLS with
--tls-cert and --tls-key, and stops on SIGINT or SIGTERM after the requests in
flight (up to 10s).`,
		Example: `  rpr ingress --redis redis://hub.internal:6379/0
  rpr ingress --redis redis://hub.internal:6379/0 --listen 0.0.0.0:8080 --grpc-listen 0.0.0.0:9090
  rpr ingress --listen :8443 --tls-cert ingress.crt --tls-key ingress.key`,
		Args: usageArgs(0, 0, "rpr ingress [--redis URL] [--listen ADDR] [--grpc-listen ADDR]"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			for flag, addr := range map[string]string{"--listen": cfg.listen, "--grpc-listen": cfg.grpcListen} {
				if addr == "" {
					continue
				}
				if _, _, err := net.SplitHostPort(addr); err != nil {
					return badInput(fmt.Errorf("%s %q: want host:port, e.g. %s 127.0.0.1:8080", flag, addr, flag))
				}
			}
			if (cfg.certFile == "") != (cfg.keyFile == "") {
				return badInput(errors.New("--tls-cert and --tls-key go together: give both, or neither"))
			}
			return runIngress(cmd, rf, cfg)
		},
	}
	rf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&cfg.listen, "listen", "127.0.0.1:8080", "address to take HTTP and gRPC on")
	f.StringVar(&cfg.grpcListen, "grpc-listen", "", "also take gRPC alone on this address (faster than --listen's HTTP/2; TLS too with --tls-cert)")
	f.StringVar(&cfg.certFile, "tls-cert", "", "serve TLS with this PEM certificate chain")
	f.StringVar(&cfg.keyFile, "tls-key", "", "the PEM key of --tls-cert")
	f.StringVar(&cfg.routesFile, "routes-file", "", "a static route table instead of Redis's (see rpr egress --help)")
	f.StringVar(&cfg.callerHeader, "caller-header", "", "the request header that names the caller for rate limits (e.g. X-Api-Key); default: the caller's IP address")
	cfg.caller.register(f)
	return cmd
}

type ingressConfig struct {
	listen, grpcListen, certFile, keyFile, routesFile, callerHeader string
	caller                                                          callerFlags
}

func runIngress(cmd *cobra.Command, rf redisFlags, cfg ingressConfig) error {
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
	creds, err := cfg.caller.credentials()
	if err != nil {
		return badInput(err)
	}
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Prefix: rf.prefix, MaxRequestBytes: tunnelMessageBytes, MaxResponseBytes: tunnelMessageBytes, Logger: log, Credentials: creds})
	if err != nil {
		return badInput(err)
	}
	defer client.Close()
	id := upstream.NewIngressID()
	tables, err := openTables(openCtx, rdb, rf.prefix, cfg.routesFile, id, log)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	tables.run(runCtx, &wg)

	h, err := ingress.New(client, ingress.Options{HTTPRoutes: tables.http, GRPCRoutes: tables.grpc, Log: log, CallerHeader: cfg.callerHeader})
	if err != nil {
		return err
	}
	var tlsConfig *tls.Config
	if cfg.certFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.certFile, cfg.keyFile)
		if err != nil {
			return badInput(fmt.Errorf("--tls-cert %s, --tls-key %s: %w", cfg.certFile, cfg.keyFile, err))
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return badInput(fmt.Errorf("--listen %q: %w", cfg.listen, err))
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(true)
	server := &http.Server{Handler: h, Protocols: protocols, TLSConfig: tlsConfig, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 2)
	scheme := "http"
	if cfg.certFile != "" {
		scheme = "https"
		go func() { served <- server.ServeTLS(ln, "", "") }()
	} else {
		go func() { served <- server.Serve(ln) }()
	}
	grpcLine := ""
	if cfg.grpcListen != "" {
		gl, err := net.Listen("tcp", cfg.grpcListen)
		if err != nil {
			_ = server.Close()
			return badInput(fmt.Errorf("--grpc-listen %q: %w", cfg.grpcListen, err))
		}
		if tlsConfig != nil {
			gl = tls.NewListener(gl, &tls.Config{Certificates: tlsConfig.Certificates, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12})
		}
		go func() { served <- h.ServeGRPC(gl) }()
		grpcLine = ", gRPC alone on " + gl.Addr().String()
	}
	source := tables.source
	if cfg.routesFile == "" {
		source += "; reports as " + id
	}
	fmt.Fprintf(cmd.OutOrStdout(), "rpr ingress: taking HTTP and gRPC on %s://%s%s, through %s (%s)\n",
		scheme, ln.Addr(), grpcLine, tunnel.RedactURL(rf.url), source)

	select {
	case err := <-served:
		_ = server.Close()
		h.Stop()
		if err == nil || errors.Is(err, http.ErrServerClosed) {
			err = errors.New("a listener stopped unexpectedly")
		}
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancelShutdown := context.WithTimeout(context.WithoutCancel(ctx), ingressShutdown)
	defer cancelShutdown()
	if err := server.Shutdown(shutdownCtx); err != nil {
		_ = server.Close()
	}
	h.Stop()
	fmt.Fprintln(cmd.OutOrStdout(), "rpr ingress: stopped")
	return nil
}
