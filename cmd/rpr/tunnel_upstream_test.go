package main

// The recording HTTP upstreams of the tunnel tests: every request an
// upstream receives is a tunHit, so a test can count, per request id,
// idempotency key or its own tag, what the upstream executed and what it
// answered.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// Headers the tests put on their requests.
const (
	// tagHeader is the test's own name for a request ("s1", "load-17").
	tagHeader = "X-Test-Tag"
	// seqHeader is a load generator's sequence number.
	seqHeader = "X-Test-Seq"
)

// tunHit is one request an upstream received.
type tunHit struct {
	N         int       `json:"n"`        // arrival number at this upstream, from 1
	KeyN      int       `json:"key_n"`    // arrival number among the hits of its Key, from 1 (0: no key)
	At        time.Time `json:"at"`       // when it arrived
	Upstream  string    `json:"upstream"` // the upstream's name
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	Query     string    `json:"query,omitempty"`
	RequestID string    `json:"request_id"`    // X-Rpr-Request-Id
	Key       string    `json:"key,omitempty"` // Idempotency-Key
	Tag       string    `json:"tag,omitempty"` // X-Test-Tag
	Seq       string    `json:"seq,omitempty"` // X-Test-Seq
	BodyLen   int       `json:"body_len"`
	BodySHA   string    `json:"body_sha"`
	// Status is what the upstream answered; 0 while it holds the request,
	// and for good when the caller went away first.
	Status int `json:"status"`
}

// tunRecorder records the hits of one upstream.
type tunRecorder struct {
	name string
	mu   sync.Mutex
	hits []*tunHit
	// onAnswer, when set, sees each hit once answered (or abandoned).
	onAnswer func(tunHit)
}

// record notes a request and its body as received.
func (r *tunRecorder) record(req *http.Request, body []byte) *tunHit {
	sum := sha256.Sum256(body)
	r.mu.Lock()
	defer r.mu.Unlock()
	key, keyN := req.Header.Get("Idempotency-Key"), 0
	if key != "" {
		keyN = 1
		for _, o := range r.hits {
			if o.Key == key {
				keyN++
			}
		}
	}
	h := &tunHit{
		N: len(r.hits) + 1, KeyN: keyN, At: time.Now(), Upstream: r.name, Method: req.Method, Path: req.URL.Path, Query: req.URL.RawQuery,
		RequestID: req.Header.Get("X-Rpr-Request-Id"), Key: key,
		Tag: req.Header.Get(tagHeader), Seq: req.Header.Get(seqHeader),
		BodyLen: len(body), BodySHA: hex.EncodeToString(sum[:]),
	}
	r.hits = append(r.hits, h)
	return h
}

// answered notes what the upstream answered h (0: nothing, the caller
// went away).
func (r *tunRecorder) answered(h *tunHit, status int) {
	r.mu.Lock()
	h.Status = status
	cp := *h
	r.mu.Unlock()
	if r.onAnswer != nil {
		r.onAnswer(cp)
	}
}

// Hits returns a copy of every hit so far, in arrival order.
func (r *tunRecorder) Hits() []tunHit {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]tunHit, len(r.hits))
	for i, h := range r.hits {
		out[i] = *h
	}
	return out
}

// where returns the hits keep accepts.
func (r *tunRecorder) where(keep func(tunHit) bool) []tunHit {
	return slices.DeleteFunc(r.Hits(), func(h tunHit) bool { return !keep(h) })
}

func (r *tunRecorder) byTag(tag string) []tunHit {
	return r.where(func(h tunHit) bool { return h.Tag == tag })
}

func (r *tunRecorder) byKey(key string) []tunHit {
	return r.where(func(h tunHit) bool { return h.Key == key })
}

// tunHandler is an upstream's behaviour for one request: it returns the
// status it answered (0 if it answered nothing).
type tunHandler func(w http.ResponseWriter, req *http.Request, hit *tunHit, body []byte) int

// recording wraps handle: it reads the body, records the hit, and notes
// the answer.
func (r *tunRecorder) recording(handle tunHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		hit := r.record(req, body)
		r.answered(hit, handle(w, req, hit, body))
	})
}

// startUpstream starts a recording upstream on loopback.
func startUpstream(t *testing.T, name string, handle tunHandler) (*tunRecorder, *httptest.Server) {
	t.Helper()
	rec := &tunRecorder{name: name}
	s := httptest.NewServer(rec.recording(handle))
	t.Cleanup(s.Close)
	return rec, s
}

// upReply writes status and a small JSON body naming the hit.
func upReply(w http.ResponseWriter, hit *tunHit, status int) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"upstream": hit.Upstream, "n": hit.N, "body_len": hit.BodyLen, "body_sha": hit.BodySHA})
	return status
}

// upHold blocks until release is closed (then answers status) or the
// caller goes away (the egress died: nothing answered).
func upHold(w http.ResponseWriter, req *http.Request, hit *tunHit, release <-chan struct{}, status int) int {
	select {
	case <-release:
		return upReply(w, hit, status)
	case <-req.Context().Done():
		return 0
	}
}
