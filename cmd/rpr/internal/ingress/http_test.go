package ingress_test

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/ingress"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
)

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestForwardSync sends requests through ingress, Redis and egress to an
// upstream and checks what the upstream saw and what the caller got.
func TestForwardSync(t *testing.T) {
	var mu sync.Mutex
	var seen *http.Request
	var seenBody string
	up := upstreamServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen, seenBody = r.Clone(r.Context()), string(b)
		mu.Unlock()
		w.Header().Set("X-Answer", "42")
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "must not cross")
		w.Header().Set("Trailer", "X-Checksum")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "made: "+string(b))
		w.Header().Set("X-Checksum", "abc")
	})
	w := newWorld(t, upstream.Route{Name: "orders", PathPrefix: "/orders", Upstream: up.URL + "/v1", StripPrefix: true})

	req := w.request("POST", "/orders/a%2Fb/items?x=1&y=%20", strings.NewReader("order 7"))
	req.Header.Set("X-Caller", "me")
	req.Header.Set("Connection", "X-Secret-Hop")
	req.Header.Set("X-Secret-Hop", "nope")
	req.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	resp := w.do(req)
	body := readAll(t, resp.Body)
	if resp.StatusCode != http.StatusCreated || body != "made: order 7" {
		t.Fatalf("answer %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Answer") != "42" || resp.Header.Get("X-Hop") != "" {
		t.Errorf("response headers: %v", resp.Header)
	}
	if resp.Trailer.Get("X-Checksum") != "abc" {
		t.Errorf("trailers: %v", resp.Trailer)
	}
	id := resp.Header.Get(ingress.RequestIDHeader)
	if id == "" {
		t.Error("no request id in the answer")
	}

	mu.Lock()
	defer mu.Unlock()
	if seen.URL.EscapedPath() != "/v1/a%2Fb/items" || seen.URL.RawQuery != "x=1&y=%20" || seen.Method != "POST" || seenBody != "order 7" {
		t.Errorf("upstream got %s %s?%s %q", seen.Method, seen.URL.EscapedPath(), seen.URL.RawQuery, seenBody)
	}
	h := seen.Header
	for name, want := range map[string]string{
		"X-Caller":          "me",
		"X-Secret-Hop":      "",
		"X-Forwarded-For":   "127.0.0.1",
		"X-Forwarded-Proto": "http",
		"X-Forwarded-Host":  strings.TrimPrefix(w.ingress.URL, "http://"),
		"X-Rpr-Request-Id":  id,
		"X-Request-Id":      id,
	} {
		if got := h.Get(name); got != want {
			t.Errorf("upstream header %s = %q, want %q", name, got, want)
		}
	}
	// The caller's trace continues (with a tracing SDK installed, rpr's
	// spans come in between).
	if tp := h.Get("Traceparent"); !strings.HasPrefix(tp, "00-0af7651916cd43dd8448eb211c80319c-") {
		t.Errorf("upstream traceparent = %q, want the caller's trace", tp)
	}
	if seen.Host != strings.TrimPrefix(up.URL, "http://") {
		t.Errorf("upstream Host = %q, want its own", seen.Host)
	}
}

// TestForwardFailures: each way a forward fails gets the status and the
// outcome a caller needs.
func TestForwardFailures(t *testing.T) {
	slow := make(chan struct{})
	t.Cleanup(func() { close(slow) })
	up := upstreamServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-slow:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "ok")
	})
	down := upstreamServer(t, func(http.ResponseWriter, *http.Request) {})
	down.Close() // nothing listens there now
	w := newWorld(t,
		upstream.Route{Name: "up", PathPrefix: "/", Upstream: up.URL, MaxBodyBytes: 10},
		upstream.Route{Name: "down", PathPrefix: "/down", Upstream: down.URL},
	)
	w.setRoutes(
		upstream.Route{Name: "up", PathPrefix: "/", Upstream: up.URL, MaxBodyBytes: 10},
		upstream.Route{Name: "down", PathPrefix: "/down", Upstream: down.URL},
	)

	check := func(name string, req *http.Request, status int, outcome, mention string) {
		t.Helper()
		resp := w.do(req)
		body := readAll(t, resp.Body)
		if resp.StatusCode != status || resp.Header.Get(ingress.OutcomeHeader) != outcome || !strings.Contains(body, mention) {
			t.Errorf("%s: %d, outcome %q, body %q; want %d, %q, mentioning %q", name, resp.StatusCode, resp.Header.Get(ingress.OutcomeHeader), body, status, outcome, mention)
		}
	}
	check("too large", w.request("POST", "/x", strings.NewReader("eleven bytes")), http.StatusRequestEntityTooLarge, "", "--max-body")
	check("upstream down", w.request("GET", "/down/x", nil), http.StatusBadGateway, ingress.OutcomeNotExecuted, "it was not sent")
	req := w.request("GET", "/slow", nil)
	req.Header.Set(ingress.TimeoutHeader, "300ms")
	check("upstream slow", req, http.StatusGatewayTimeout, ingress.OutcomeMayHaveExecuted, "DEADLINE_EXCEEDED")
	req = w.request("GET", "/x", nil)
	req.Header.Set(ingress.TimeoutHeader, "soon")
	check("bad timeout", req, http.StatusBadRequest, "", "want a positive duration")

	w.setRoutes(upstream.Route{Name: "only", PathPrefix: "/only", Upstream: up.URL})
	check("no route", w.request("GET", "/x", nil), http.StatusNotFound, "", "no route takes")
}

// TestForwardStream: a server-sent event reaches the caller while the
// upstream is still sending.
func TestForwardStream(t *testing.T) {
	more := make(chan struct{})
	up := upstreamServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-more:
		case <-time.After(10 * time.Second):
		}
		io.WriteString(w, "data: second\n\n")
	})
	w := newWorld(t, upstream.Route{Name: "events", PathPrefix: "/events", Upstream: up.URL})
	req := w.request("GET", "/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp := w.do(req)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("answer %d %v", resp.StatusCode, resp.Header)
	}
	r := bufio.NewReader(resp.Body)
	line, err := r.ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	close(more) // only now does the upstream finish
	rest := readAll(t, r)
	if rest != "\ndata: second\n\n" {
		t.Errorf("rest = %q", rest)
	}
}
