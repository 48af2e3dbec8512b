package main

// The helper roles of the two-network test (tunnel_e2e_test.go) that run
// inside siteB: the upstreams (HTTP and gRPC) the tunnel forwards to, and
// a TCP dialer for the isolation checks.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

const (
	roleSiteUpstream = "site-upstream"
	roleDial         = "dial"

	// Environment of the roles.
	envUpstreamHTTP = "RPR_TUNNEL_UPSTREAM_HTTP" // site-upstream: host:port of the HTTP upstream
	envUpstreamGRPC = "RPR_TUNNEL_UPSTREAM_GRPC" // site-upstream: host:port of the gRPC upstream
	envDialAddrs    = "RPR_TUNNEL_DIAL"          // dial: comma-separated host:port list

	// markerReady is what site-upstream prints once both upstreams listen.
	markerReady = "ready"
	// hitPrefix starts the line site-upstream prints for each request
	// it answered: "hit " and the tunHit as JSON.
	hitPrefix = "hit "

	// streamStep bounds how long a streamed response waits for the
	// client's release of its next part.
	streamStep = 20 * time.Second
)

func init() {
	tunnelRoles[roleSiteUpstream] = siteUpstreamRole
	tunnelRoles[roleDial] = dialRole
}

// dialRole opens a TCP connection to each address of envDialAddrs within
// 2 s and prints what happened: exit 0 when all opened, 2 when none did,
// 1 for a mix.
func dialRole() int {
	opened, failed := 0, 0
	for _, addr := range strings.Split(os.Getenv(envDialAddrs), ",") {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			fmt.Printf("blocked %s: %v\n", addr, err)
			failed++
			continue
		}
		c.Close()
		fmt.Printf("opened %s\n", addr)
		opened++
	}
	switch {
	case failed == 0:
		return 0
	case opened == 0:
		return 2
	}
	return 1
}

// releases are the steps of the streamed responses: stream S's part i+1
// goes out once the client, having read part i, posts
// /e2e/release?stream=S&i=I through the tunnel. So a part that the client
// reads before the upstream has finished proves that the response arrives
// incrementally, with no timing involved.
type releases struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func (r *releases) of(stream, i string) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = map[string]chan struct{}{}
	}
	key := stream + "/" + i
	if r.ch[key] == nil {
		r.ch[key] = make(chan struct{})
	}
	return r.ch[key]
}

// siteUpstreamHandler is siteB's HTTP upstream:
//
//	GET  /e2e/hello                  200 "hello from siteB"
//	POST /e2e/echo                   200 {"body_len", "body_sha", ...}
//	GET  /e2e/load?i=N               200 {...}
//	GET  /e2e/events?stream=S&n=N    text/event-stream, N events, each after the previous one's release
//	GET  /e2e-dl/file?stream=S&n=N   a chunked download, the same way
//	POST /e2e/release?stream=S&i=I   releases part I+1 of stream S
//	POST /e2e/jobs/...               200 (an async route's deliveries)
//	GET  /e2e/seen?key=K             200 and how many deliveries of key K were answered
func siteUpstreamHandler(rec *tunRecorder) http.Handler {
	var rel releases
	var mu sync.Mutex
	delivered := map[string]int{}
	return rec.recording(func(w http.ResponseWriter, req *http.Request, hit *tunHit, _ []byte) int {
		q := req.URL.Query()
		switch p := req.URL.Path; {
		case p == "/e2e/hello":
			io.WriteString(w, "hello from siteB")
			return http.StatusOK
		case p == "/e2e/echo", p == "/e2e/load":
			return upReply(w, hit, http.StatusOK)
		case p == "/e2e/release":
			close(rel.of(q.Get("stream"), q.Get("i")))
			w.WriteHeader(http.StatusNoContent)
			return http.StatusNoContent
		case strings.HasPrefix(p, "/e2e/jobs/"):
			mu.Lock()
			delivered[hit.Key]++
			mu.Unlock()
			return upReply(w, hit, http.StatusOK)
		case p == "/e2e/seen":
			mu.Lock()
			n := delivered[q.Get("key")]
			mu.Unlock()
			io.WriteString(w, strconv.Itoa(n))
			return http.StatusOK
		case p == "/e2e/events", p == "/e2e-dl/file":
			return streamParts(w, req, &rel, p == "/e2e/events")
		}
		http.NotFound(w, req)
		return http.StatusNotFound
	})
}

// streamParts writes n parts of stream q.stream, each flushed, waiting
// for the release of each before the next.
func streamParts(w http.ResponseWriter, req *http.Request, rel *releases, sse bool) int {
	q := req.URL.Query()
	n, err := strconv.Atoi(q.Get("n"))
	if err != nil || n < 1 {
		http.Error(w, "want n", http.StatusBadRequest)
		return http.StatusBadRequest
	}
	if sse {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for i := 1; i <= n; i++ {
		if sse {
			fmt.Fprintf(w, "id: %d\ndata: part %d\n\n", i, i)
		} else {
			fmt.Fprintf(w, "part %d\n", i)
		}
		if err := rc.Flush(); err != nil {
			return http.StatusOK
		}
		if i == n {
			break
		}
		select {
		case <-rel.of(q.Get("stream"), strconv.Itoa(i)):
		case <-time.After(streamStep):
			fmt.Fprintf(w, "no release of part %d within %v\n", i, streamStep)
			return http.StatusOK
		case <-req.Context().Done():
			return http.StatusOK
		}
	}
	return http.StatusOK
}

// siteUpstreamRole serves siteB's HTTP upstream on envUpstreamHTTP and
// the gRPC interop TestService (grpc-go's own) on envUpstreamGRPC until
// SIGTERM. It prints markerReady once both listen, and a hit line for
// each HTTP request it answered.
func siteUpstreamRole() int {
	hl, err := net.Listen("tcp", os.Getenv(envUpstreamHTTP))
	if err != nil {
		fmt.Fprintln(os.Stderr, "site-upstream:", err)
		return 1
	}
	gl, err := net.Listen("tcp", os.Getenv(envUpstreamGRPC))
	if err != nil {
		fmt.Fprintln(os.Stderr, "site-upstream:", err)
		return 1
	}
	var out sync.Mutex
	rec := &tunRecorder{name: "siteB", onAnswer: func(h tunHit) {
		b, _ := json.Marshal(h)
		out.Lock()
		defer out.Unlock()
		fmt.Printf("%s%s\n", hitPrefix, b)
	}}
	hs := &http.Server{Handler: siteUpstreamHandler(rec), ReadHeaderTimeout: 10 * time.Second}
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, interop.NewTestServer())
	go func() { _ = hs.Serve(hl) }()
	go func() { _ = gs.Serve(gl) }()
	out.Lock()
	fmt.Println(markerReady)
	out.Unlock()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(shutdown)
	gs.Stop()
	return 0
}
