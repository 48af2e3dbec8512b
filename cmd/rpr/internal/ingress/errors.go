package ingress

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/egress"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	"github.com/rprtunnel/rpr/tunnel"
)

// fail answers a request that got no upstream response: the status says
// what went wrong, OutcomeHeader whether the upstream may have run it,
// Retry-After when to try again, and the body the whole story.
func (h *Handler) fail(w http.ResponseWriter, id string, route *upstream.Route, err error) {
	status, outcome := statusOf(err)
	if status == 0 {
		return // the caller went away: nobody to answer
	}
	name := ""
	if route != nil {
		name = route.Name
	}
	h.opts.Log.Warn("rpr ingress: request failed", "request_id", id, "route", name, "status", status, "outcome", outcome, "error", err)
	if after, ok := tunnel.RetryAfter(err); ok {
		w.Header().Set("Retry-After", strconv.Itoa(int((after+time.Second-1)/time.Second)))
	}
	httpError(w, id, status, outcome, err.Error())
}

// statusOf maps a tunnel failure to an HTTP status and an outcome; status
// 0 is a caller that cancelled.
func statusOf(err error) (status int, outcome string) {
	outcome = OutcomeMayHaveExecuted
	if tunnel.NotExecuted(err) {
		outcome = OutcomeNotExecuted
	}
	switch tunnel.ErrorReason(err) {
	case tunnel.ReasonRateLimited:
		return http.StatusTooManyRequests, OutcomeNotExecuted
	case tunnel.ReasonQueueFull, tunnel.ReasonCircuitOpen:
		return http.StatusServiceUnavailable, OutcomeNotExecuted
	}
	code := tunnel.CodeOf(err)
	if f, ok := egress.FailureOf(err); ok {
		if f.Reason == egress.ReasonNoRoute || !f.Sent {
			outcome = OutcomeNotExecuted
		}
		if code == tunnel.DeadlineExceeded {
			return http.StatusGatewayTimeout, outcome
		}
		return http.StatusBadGateway, outcome
	}
	switch code {
	case tunnel.Canceled:
		return 0, outcome
	case tunnel.DeadlineExceeded:
		return http.StatusGatewayTimeout, outcome
	case tunnel.Unavailable:
		return http.StatusServiceUnavailable, outcome
	}
	return http.StatusBadGateway, outcome
}

// httpError writes a plain-text error answer.
func httpError(w http.ResponseWriter, id string, status int, outcome, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	if id != "" {
		h.Set(RequestIDHeader, id)
	}
	if outcome != "" {
		h.Set(OutcomeHeader, outcome)
	}
	w.WriteHeader(status)
	fmt.Fprintln(w, msg)
}
