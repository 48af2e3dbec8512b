package faulttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

// The test binary doubles as the suite's server and client programs: with
// RPR_FAULT_ROLE set, TestMain runs that role instead of the tests. The
// other variables configure the role; startServer and startClientProc set
// them.
const (
	envRole        = "RPR_FAULT_ROLE"        // "server" or "client"
	envRedisURL    = "RPR_FAULT_REDIS"       // redis://127.0.0.1:PORT/0
	envWorker      = "RPR_FAULT_WORKER"      // server: ServerOptions.WorkerID
	envLease       = "RPR_FAULT_LEASE"       // server: ServerOptions.Lease ("1s"; empty: default)
	envConcurrency = "RPR_FAULT_CONCURRENCY" // server: ServerOptions.Concurrency
	envClientID    = "RPR_FAULT_CLIENT_ID"   // client: ClientOptions.ID
	envCallSleep   = "RPR_FAULT_SLEEP"       // client: the request value ("3s")
	envCallTimeout = "RPR_FAULT_TIMEOUT"     // client: the call's timeout ("30s")

	roleServer = "server"
	roleClient = "client"

	// Lines a role prints on stdout, alone on their line.
	markerReady   = "ready"   // server: serving, heartbeat in Redis; client: connected
	markerCalling = "calling" // client: about to send its call
)

func TestMain(m *testing.M) {
	switch role := os.Getenv(envRole); role {
	case "":
		// go-redis logs every failed dial to stderr; the fault tests cause
		// thousands on purpose and judge outcomes, not that noise. (Role
		// processes keep it: their output is shown when a test fails.)
		redis.SetLogger(discardRedisLog{})
		os.Exit(m.Run())
	case roleServer:
		os.Exit(serverRole())
	case roleClient:
		os.Exit(clientRole())
	default:
		if run := extraRoles[role]; run != nil {
			os.Exit(run())
		}
		fmt.Fprintf(os.Stderr, "faulttest: unknown %s=%q\n", envRole, role)
		os.Exit(2)
	}
}

// extraRoles are roles that other files of the suite add (in their init
// functions), by the value of RPR_FAULT_ROLE that selects them.
var extraRoles = map[string]func() int{}

type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}

func roleLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// serverRole serves fault.v1.Work until SIGTERM, then shuts down
// gracefully and exits 0. It prints "ready" once Serve runs and this
// worker's first heartbeat is in Redis, so clients can see it.
func serverRole() int {
	return runServerRole("server", workersHash, tunnel.ServerOptions{},
		func(srv *tunnel.Server, rec *redis.Client, worker string, log *slog.Logger) {
			srv.RegisterService(&workDesc, &work{rec: rec, worker: worker, log: log})
		})
}

// runServerRole is the body of every server role: it takes the worker id,
// lease and concurrency from the environment, opens Redis and the
// recorder, lets register add the role's service, and serves until
// SIGTERM. It prints "ready" once the worker's first heartbeat is in the
// workers hash, and "stopped" after a graceful shutdown.
func runServerRole(name, workers string, opts tunnel.ServerOptions, register func(srv *tunnel.Server, rec *redis.Client, worker string, log *slog.Logger)) int {
	log := roleLogger()
	fail := func(format string, args ...any) int {
		log.Error("faulttest " + name + ": " + fmt.Sprintf(format, args...))
		return 1
	}
	url, worker := os.Getenv(envRedisURL), os.Getenv(envWorker)
	if url == "" || worker == "" {
		return fail("%s and %s must be set", envRedisURL, envWorker)
	}
	opts.WorkerID, opts.Logger = worker, log
	if v := os.Getenv(envLease); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fail("%s: %v", envLease, err)
		}
		opts.Lease = d
	}
	if v := os.Getenv(envConcurrency); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fail("%s: %v", envConcurrency, err)
		}
		opts.Concurrency = n
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	openCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	rdb, err := tunnel.Open(openCtx, url)
	if err != nil {
		return fail("%v", err)
	}
	defer rdb.Close()
	rec, err := newRecorder(url)
	if err != nil {
		return fail("%v", err)
	}
	defer rec.Close()
	srv, err := tunnel.NewServer(rdb, opts)
	if err != nil {
		return fail("%v", err)
	}
	register(srv, rec, worker, log)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	for {
		if n, err := rec.HExists(openCtx, workers, worker).Result(); err == nil && n {
			break
		}
		select {
		case err := <-served:
			return fail("Serve returned before the first heartbeat: %v", err)
		case <-openCtx.Done():
			return fail("no heartbeat of %s in %s within 20s", worker, workers)
		case <-time.After(10 * time.Millisecond):
		}
	}
	fmt.Println(markerReady)
	if err := <-served; err != nil {
		return fail("Serve: %v", err)
	}
	fmt.Println("stopped")
	return 0
}

// clientRole makes one Write call and prints its outcome, unless the test
// kills it first. It prints "ready" when connected and "calling" just
// before the call.
func clientRole() int {
	log := roleLogger()
	fail := func(format string, args ...any) int {
		log.Error("faulttest client: " + fmt.Sprintf(format, args...))
		return 1
	}
	url, id := os.Getenv(envRedisURL), os.Getenv(envClientID)
	sleep, timeout := os.Getenv(envCallSleep), os.Getenv(envCallTimeout)
	d, err := time.ParseDuration(timeout)
	if url == "" || id == "" || sleep == "" || err != nil {
		return fail("%s, %s, %s and %s (a duration) must be set", envRedisURL, envClientID, envCallSleep, envCallTimeout)
	}
	ctx := context.Background()
	openCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	rdb, err := tunnel.Open(openCtx, url)
	if err != nil {
		return fail("%v", err)
	}
	defer rdb.Close()
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{ID: id, BizCode: bizCode, Logger: log})
	if err != nil {
		return fail("%v", err)
	}
	defer client.Close()
	fmt.Println(markerReady)
	fmt.Println(markerCalling)
	var rid string
	out := new(wrapperspb.StringValue)
	err = client.Invoke(ctx, writeMethod, wrapperspb.String(sleep), out, tunnel.WithTimeout(d), tunnel.CaptureRequestID(&rid))
	var terr *tunnel.Error
	if err != nil && !errors.As(err, &terr) {
		return fail("call returned a non-status error: %v", err)
	}
	fmt.Printf("result %s %s %s\n", tunnel.CodeOf(err), rid, out.GetValue())
	return 0
}
