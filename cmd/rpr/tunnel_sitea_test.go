package main

// The siteA client of the two-network test (tunnel_e2e_test.go): a Go
// HTTP client and a grpc-go client that talk to rpr ingress in their own
// network only, and print a result line for each step:
//
//	ok STEP {json}     the step worked; the JSON is what the test checks
//	FAIL STEP: why     it did not (and the role exits 1)

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

const (
	roleSiteClient = "site-client"

	envIngressHTTP = "RPR_TUNNEL_INGRESS"      // site-client: the ingress's host:port
	envIngressGRPC = "RPR_TUNNEL_INGRESS_GRPC" // site-client: its --grpc-listen host:port
	envForbidden   = "RPR_TUNNEL_FORBIDDEN"    // site-client: addresses that must not be reachable
	envSteps       = "RPR_TUNNEL_STEPS"        // site-client: "http" or "grpc"

	// The bounded loads: loadRequests requests, loadConcurrency at once.
	loadRequests    = 200
	loadConcurrency = 8
)

func init() { tunnelRoles[roleSiteClient] = siteClientRole }

// stepResult is what a step reports to the test.
type stepResult struct {
	Status    int               `json:"status,omitempty"`
	RequestID string            `json:"request_id,omitempty"`
	Key       string            `json:"key,omitempty"`
	BodyLen   int               `json:"body_len,omitempty"`
	BodySHA   string            `json:"body_sha,omitempty"`
	Parts     int               `json:"parts,omitempty"`
	Tags      map[string]string `json:"tags,omitempty"` // load: tag -> request id
	Detail    string            `json:"detail,omitempty"`
}

type siteClient struct {
	base string
	hc   *http.Client
}

func siteClientRole() int {
	c := &siteClient{base: "http://" + os.Getenv(envIngressHTTP), hc: &http.Client{Timeout: 30 * time.Second}}
	type step struct {
		name string
		run  func() (stepResult, error)
	}
	var steps []step
	switch os.Getenv(envSteps) {
	case "http":
		steps = []step{
			{"isolation", isolation},
			{"get", c.get}, {"post", c.post},
			{"sse", func() (stepResult, error) { return c.stream("/e2e/events", "sse-1", true) }},
			{"download", func() (stepResult, error) { return c.stream("/e2e-dl/file", "dl-1", false) }},
			{"async", c.async}, {"load", c.load},
		}
	case "grpc":
		for _, l := range []struct{ name, addr string }{{"h2c", os.Getenv(envIngressHTTP)}, {"grpc-listen", os.Getenv(envIngressGRPC)}} {
			steps = append(steps, step{"grpc-" + l.name, func() (stepResult, error) { return grpcCases(l.addr, l.name == "grpc-listen") }})
		}
	default:
		fmt.Printf("FAIL setup: %s=%q, want http or grpc\n", envSteps, os.Getenv(envSteps))
		return 1
	}
	for _, s := range steps {
		r, err := s.run()
		if err != nil {
			fmt.Printf("FAIL %s: %v\n", s.name, err)
			return 1
		}
		b, _ := json.Marshal(r)
		fmt.Printf("ok %s %s\n", s.name, b)
	}
	return 0
}

// isolation: siteA cannot open a connection to any upstream address.
func isolation() (stepResult, error) {
	var blocked []string
	for _, addr := range strings.Split(os.Getenv(envForbidden), ",") {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
			return stepResult{}, fmt.Errorf("opened a TCP connection to %s: the sites are not isolated", addr)
		}
		blocked = append(blocked, fmt.Sprintf("%s: %v", addr, err))
	}
	return stepResult{Detail: strings.Join(blocked, "; ")}, nil
}

// do sends one request to the ingress and reads the whole answer.
func (c *siteClient) do(method, path string, body []byte, hdr ...string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func (c *siteClient) get() (stepResult, error) {
	resp, body, err := c.do("GET", "/e2e/hello", nil, tagHeader, "get")
	if err != nil {
		return stepResult{}, err
	}
	if resp.StatusCode != http.StatusOK || string(body) != "hello from siteB" {
		return stepResult{}, fmt.Errorf("GET /e2e/hello: %d %q", resp.StatusCode, body)
	}
	return stepResult{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Rpr-Request-Id")}, nil
}

func (c *siteClient) post() (stepResult, error) {
	body := make([]byte, 256<<10)
	_, _ = rand.Read(body)
	sum := sha256.Sum256(body)
	resp, answer, err := c.do("POST", "/e2e/echo", body, tagHeader, "post", "Content-Type", "application/octet-stream")
	if err != nil {
		return stepResult{}, err
	}
	var got struct {
		BodyLen int    `json:"body_len"`
		BodySHA string `json:"body_sha"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(answer, &got) != nil || got.BodyLen != len(body) || got.BodySHA != hex.EncodeToString(sum[:]) {
		return stepResult{}, fmt.Errorf("POST /e2e/echo of %d bytes: %d %q", len(body), resp.StatusCode, answer)
	}
	return stepResult{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Rpr-Request-Id"), BodyLen: got.BodyLen, BodySHA: got.BodySHA}, nil
}

// streamedParts is how many parts the streamed responses have.
const streamedParts = 3

// stream reads a streamed response (server-sent events, or a chunked
// download) part by part, releasing each next part through the tunnel
// only after it has read the one before: the upstream cannot finish
// before the client has its first part.
func (c *siteClient) stream(path, stream string, sse bool) (stepResult, error) {
	req, err := http.NewRequest("GET", fmt.Sprintf("%s%s?stream=%s&n=%d", c.base, path, stream, streamedParts), nil)
	if err != nil {
		return stepResult{}, err
	}
	req.Header.Set(tagHeader, stream)
	if sse {
		req.Header.Set("Accept", "text/event-stream")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return stepResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return stepResult{}, fmt.Errorf("GET %s: %d %q", path, resp.StatusCode, b)
	}
	r := bufio.NewReader(resp.Body)
	for i := 1; i <= streamedParts; i++ {
		want := fmt.Sprintf("part %d", i)
		if sse {
			want = fmt.Sprintf("id: %d\ndata: part %d\n", i, i)
		}
		var got string
		for !strings.HasSuffix(got, want+"\n") {
			line, err := r.ReadString('\n')
			got += line
			if err != nil {
				return stepResult{}, fmt.Errorf("part %d: read %q: %v", i, got, err)
			}
		}
		if i < streamedParts {
			rr, b, err := c.do("POST", fmt.Sprintf("/e2e/release?stream=%s&i=%d", stream, i), nil)
			if err != nil || rr.StatusCode != http.StatusNoContent {
				return stepResult{}, fmt.Errorf("release of part %d: %v %v %q", i+1, err, rr, b)
			}
		}
	}
	if rest, err := io.ReadAll(r); err != nil || strings.TrimSpace(string(rest)) != "" {
		return stepResult{}, fmt.Errorf("after the last part: %q, %v", rest, err)
	}
	return stepResult{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Rpr-Request-Id"), Parts: streamedParts, Detail: resp.Header.Get("Content-Type")}, nil
}

// async posts to an async route, takes the 202 receipt, and asks the
// upstream (through the tunnel) until it has the delivery.
func (c *siteClient) async() (stepResult, error) {
	const key = "e2e-job-1"
	resp, body, err := c.do("POST", "/e2e/jobs/1", []byte(`{"job": 1}`), "Idempotency-Key", key, tagHeader, "async")
	if err != nil {
		return stepResult{}, err
	}
	var receipt struct {
		RequestID      string `json:"request_id"`
		IdempotencyKey string `json:"idempotency_key"`
	}
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(body, &receipt) != nil || receipt.RequestID == "" || receipt.IdempotencyKey != key {
		return stepResult{}, fmt.Errorf("POST /e2e/jobs/1: %d %q; want 202 and a receipt", resp.StatusCode, body)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, body, err := c.do("GET", "/e2e/seen?key="+key, nil)
		if err == nil && resp.StatusCode == http.StatusOK && string(body) == "1" {
			break
		}
		if time.Now().After(deadline) {
			return stepResult{}, fmt.Errorf("%s not delivered within 20s: %v %q", key, err, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return stepResult{Status: http.StatusAccepted, RequestID: receipt.RequestID, Key: key}, nil
}

// load sends loadRequests requests, loadConcurrency at once, GETs and
// POSTs in turn, each tagged load-N; every one must be answered 200.
func (c *siteClient) load() (stepResult, error) {
	jobs := make(chan int)
	var mu sync.Mutex
	tags := map[string]string{}
	var errs []error
	var wg sync.WaitGroup
	t0 := time.Now()
	for range loadConcurrency {
		wg.Go(func() {
			for i := range jobs {
				tag := fmt.Sprintf("load-%d", i)
				method, path, body := "GET", fmt.Sprintf("/e2e/load?i=%d", i), []byte(nil)
				if i%2 == 1 {
					method, path, body = "POST", "/e2e/echo", []byte(tag)
				}
				resp, b, err := c.do(method, path, body, tagHeader, tag)
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, fmt.Errorf("%s: %v", tag, err))
				case resp.StatusCode != http.StatusOK:
					errs = append(errs, fmt.Errorf("%s: %d %q", tag, resp.StatusCode, b))
				default:
					tags[tag] = resp.Header.Get("X-Rpr-Request-Id")
				}
				mu.Unlock()
			}
		})
	}
	for i := range loadRequests {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(t0)
	if len(errs) > 0 {
		return stepResult{}, fmt.Errorf("%d of %d failed, first: %w", len(errs), loadRequests, errs[0])
	}
	return stepResult{Tags: tags, Detail: fmt.Sprintf("%d requests, concurrency %d, in %v (%.0f/s)",
		loadRequests, loadConcurrency, elapsed.Round(time.Millisecond), float64(loadRequests)/elapsed.Seconds())}, nil
}

// grpcCases runs grpc-go's own interop cases through the ingress at addr
// (the interop functions end the process with a message on a failure),
// and, with load, loadRequests unary calls, loadConcurrency at once.
func grpcCases(addr string, load bool) (stepResult, error) {
	if addr == "" {
		return stepResult{}, errors.New("no address")
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return stepResult{}, err
	}
	defer conn.Close()
	tc := testgrpc.NewTestServiceClient(conn)
	cases := []struct {
		name string
		run  func(context.Context, testgrpc.TestServiceClient, ...grpc.CallOption)
	}{
		{"empty_unary", interop.DoEmptyUnaryCall},
		{"large_unary", interop.DoLargeUnaryCall},
		{"server_streaming", interop.DoServerStreaming},
		{"client_streaming", interop.DoClientStreaming},
		{"ping_pong", interop.DoPingPong},
		{"empty_stream", interop.DoEmptyStream},
		{"custom_metadata", interop.DoCustomMetadata},
		{"status_code_and_message", interop.DoStatusCodeAndMessage},
		{"special_status_message", interop.DoSpecialStatusMessage},
		{"timeout_on_sleeping_server", interop.DoTimeoutOnSleepingServer},
	}
	var done []string
	for _, c := range cases {
		fmt.Printf("case %s\n", c.name) // the last one printed is the one that ended the process
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c.run(ctx, tc)
		cancel()
		done = append(done, c.name)
	}
	detail := strings.Join(done, ", ")
	if load {
		t0 := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		jobs := make(chan struct{})
		for range loadConcurrency {
			wg.Go(func() {
				for range jobs {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					_, err := tc.EmptyCall(ctx, &testgrpc.Empty{})
					cancel()
					if err != nil {
						mu.Lock()
						firstErr = cmp.Or(firstErr, err)
						mu.Unlock()
					}
				}
			})
		}
		for range loadRequests {
			jobs <- struct{}{}
		}
		close(jobs)
		wg.Wait()
		if firstErr != nil {
			return stepResult{}, fmt.Errorf("gRPC load: %w", firstErr)
		}
		elapsed := time.Since(t0)
		detail += fmt.Sprintf("; %d unary calls, concurrency %d, in %v (%.0f/s)", loadRequests, loadConcurrency, elapsed.Round(time.Millisecond), float64(loadRequests)/elapsed.Seconds())
	}
	return stepResult{Detail: detail}, nil
}
