package egress

import (
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	"github.com/rprtunnel/rpr/tunnel"
)

// ErrorDomain and the reasons of the ErrorInfo detail on a failed
// forward: what rpr ingress turns into 502 or 504, saying whether the
// upstream may have received the request (metadata "sent").
const (
	ErrorDomain = "rpr.tunnel"
	// ReasonUpstream: the upstream could not be reached or failed.
	ReasonUpstream = "UPSTREAM_FAILED"
	// ReasonNoRoute: no route of the egress's table takes the request.
	ReasonNoRoute = "NO_ROUTE"
)

// upstreamError adds to err what rpr ingress needs to answer: the route,
// the upstream and whether the request was sent.
func upstreamError(r *upstream.Route, sent bool, err *tunnel.Error) *tunnel.Error {
	with, derr := err.WithDetails(&errdetails.ErrorInfo{Reason: ReasonUpstream, Domain: ErrorDomain,
		Metadata: map[string]string{"route": r.Name, "upstream": r.Upstream, "sent": strconv.FormatBool(sent)}})
	if derr != nil {
		return err
	}
	return with
}

// Failure is what a failed forward says about the upstream (FailureOf).
type Failure struct {
	Reason string // ReasonUpstream or ReasonNoRoute
	Route  string
	// Sent: the upstream may have received the request.
	Sent bool
}

// FailureOf reads the ErrorInfo an egress put on err; false when there
// is none (the failure is rpr's, not the upstream's).
func FailureOf(err error) (Failure, bool) {
	e, ok := tunnel.AsError(err)
	if !ok {
		return Failure{}, false
	}
	for _, d := range e.Details() {
		info := new(errdetails.ErrorInfo)
		if d.MessageIs(info) && d.UnmarshalTo(info) == nil && info.GetDomain() == ErrorDomain {
			sent, _ := strconv.ParseBool(info.GetMetadata()["sent"])
			return Failure{Reason: info.GetReason(), Route: info.GetMetadata()["route"], Sent: sent}, true
		}
	}
	return Failure{}, false
}
