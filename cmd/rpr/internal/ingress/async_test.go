package ingress_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
)

// deliveries records what an async upstream received, by path.
type deliveries struct {
	mu   sync.Mutex
	keys map[string][]string // path -> Idempotency-Key of each delivery
}

func (d *deliveries) add(path, key string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.keys == nil {
		d.keys = map[string][]string{}
	}
	d.keys[path] = append(d.keys[path], key)
	return len(d.keys[path])
}

func (d *deliveries) of(path string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.keys[path]...)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDeliverAsync: an async route answers 202 with a receipt at once;
// the egress delivers with the idempotency key, retries a 5xx answer,
// dead-letters a 4xx one, and delivers a key once however often it is
// posted.
func TestDeliverAsync(t *testing.T) {
	var got deliveries
	up := upstreamServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := got.add(r.URL.Path, r.Header.Get("Idempotency-Key"))
		switch {
		case r.URL.Path == "/jobs/flaky" && n == 1:
			http.Error(w, "try later", http.StatusServiceUnavailable)
		case r.URL.Path == "/jobs/bad":
			http.Error(w, "no such customer", http.StatusUnprocessableEntity)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	w := newWorld(t, upstream.Route{Name: "jobs", PathPrefix: "/jobs", Upstream: up.URL, Mode: upstream.ModeAsync})

	post := func(path, key string) (requestID, idemKey string) {
		t.Helper()
		req := w.request("POST", path, strings.NewReader("{}"))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp := w.do(req)
		var receipt struct{ RequestID, IdempotencyKey string }
		err := json.NewDecoder(resp.Body).Decode(&struct {
			RequestID      *string `json:"request_id"`
			IdempotencyKey *string `json:"idempotency_key"`
		}{&receipt.RequestID, &receipt.IdempotencyKey})
		if resp.StatusCode != http.StatusAccepted || err != nil || receipt.RequestID == "" {
			t.Fatalf("POST %s: %d, %v, %+v", path, resp.StatusCode, err, receipt)
		}
		return receipt.RequestID, receipt.IdempotencyKey
	}

	_, key := post("/jobs/ok", "order-17")
	if key != "order-17" {
		t.Errorf("receipt key %q, want the Idempotency-Key header's", key)
	}
	waitUntil(t, "the delivery", func() bool { return len(got.of("/jobs/ok")) == 1 })
	if k := got.of("/jobs/ok")[0]; k != "order-17" {
		t.Errorf("upstream got Idempotency-Key %q", k)
	}
	// The same key again is deduplicated: it is not delivered twice.
	post("/jobs/ok", "order-17")
	svc := w.admin.Service(upstream.HTTPService)
	waitUntil(t, "the duplicate to be settled", func() bool {
		st, err := svc.Stats(context.Background())
		return err == nil && st.EntriesAdded == 2 && st.Length == 0 && st.Pending == 0
	})
	if n := len(got.of("/jobs/ok")); n != 1 {
		t.Errorf("order-17 delivered %d times", n)
	}

	// Without a key, rpr makes one (the request id) and sends it along.
	_, key = post("/jobs/flaky", "")
	waitUntil(t, "the retry", func() bool { return len(got.of("/jobs/flaky")) == 2 })
	if ks := got.of("/jobs/flaky"); ks[0] != key || ks[1] != key {
		t.Errorf("flaky deliveries carried keys %v, want %s twice", ks, key)
	}

	bad, _ := post("/jobs/bad", "")
	var letters []admin.DeadLetter
	waitUntil(t, "the dead letter", func() bool {
		var err error
		letters, err = svc.DeadLetters().List(context.Background(), admin.DeadLetterFilter{}, 10)
		return err == nil && len(letters) == 1
	})
	if l := letters[0]; l.RequestID != bad || !strings.Contains(l.Error, "422") || !strings.Contains(l.Error, "no such customer") {
		t.Errorf("dead letter %+v", l)
	}
	if n := len(got.of("/jobs/bad")); n != 1 {
		t.Errorf("a 4xx answer was delivered %d times, want once (no retry)", n)
	}
}
