package ingress_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/ingress"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestRateLimited: a limit on the tunnel service counts each HTTP caller
// (its IP address here) and turns a refusal into 429 with Retry-After,
// before anything reaches the upstream.
func TestRateLimited(t *testing.T) {
	var got deliveries
	up := upstreamServer(t, func(w http.ResponseWriter, r *http.Request) { got.add(r.URL.Path, "") })
	w := newWorld(t, upstream.Route{Name: "api", PathPrefix: "/", Upstream: up.URL})
	if _, err := w.admin.Service(upstream.HTTPService).Limits().Set(context.Background(),
		admin.LimitRule{Name: "per-ip", Method: "*", Tier: "*", Limit: 2, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	var statuses []int
	var retryAfter string
	waitUntil(t, "the limit to apply", func() bool {
		resp := w.do(w.request("GET", "/x", nil))
		statuses = append(statuses, resp.StatusCode)
		retryAfter = resp.Header.Get("Retry-After")
		return resp.StatusCode == http.StatusTooManyRequests
	})
	if n, err := strconv.Atoi(retryAfter); err != nil || n < 1 || n > 60 {
		t.Errorf("Retry-After %q, want 1 to 60 seconds", retryAfter)
	}
	if served := len(got.of("/x")); served != len(statuses)-1 || served > 2 {
		t.Errorf("upstream served %d of %d requests (statuses %v); want all but the refused one, at most the limit", served, len(statuses), statuses)
	}
}

// TestStatusOf maps each kind of failure to its status and outcome.
func TestStatusOf(t *testing.T) {
	refusal := func(code tunnel.Code, reason string) error {
		e, err := tunnel.Errorf(code, "refused").WithDetails(
			&errdetails.ErrorInfo{Reason: reason, Domain: tunnel.ErrorDomain},
			&errdetails.RetryInfo{RetryDelay: durationpb.New(3 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	for name, c := range map[string]struct {
		err     error
		status  int
		outcome string
	}{
		"rate limit":      {refusal(tunnel.ResourceExhausted, tunnel.ReasonRateLimited), 429, "not executed"},
		"queue full":      {refusal(tunnel.ResourceExhausted, tunnel.ReasonQueueFull), 503, "not executed"},
		"circuit open":    {refusal(tunnel.Unavailable, tunnel.ReasonCircuitOpen), 503, "not executed"},
		"deadline":        {tunnel.Errorf(tunnel.DeadlineExceeded, "late"), 504, "may have executed"},
		"unavailable":     {tunnel.Errorf(tunnel.Unavailable, "no egress"), 503, "may have executed"},
		"internal":        {tunnel.Errorf(tunnel.Internal, "bug"), 502, "may have executed"},
		"caller canceled": {context.Canceled, 0, "may have executed"},
		"other":           {errors.New("?"), 502, "may have executed"},
	} {
		status, outcome := ingress.StatusOf(c.err)
		if status != c.status || outcome != c.outcome {
			t.Errorf("%s: %d %q, want %d %q", name, status, outcome, c.status, c.outcome)
		}
	}
}
