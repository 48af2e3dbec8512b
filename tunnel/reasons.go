package tunnel

import (
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo details rpr puts
// on the refusals it makes itself, so that a program (an HTTP gateway, a
// dashboard) can tell them apart without reading messages.
const ErrorDomain = "rpr"

// The reasons of rpr's own refusals (ErrorReason). Each is also a code:
// RESOURCE_EXHAUSTED for ReasonRateLimited and ReasonQueueFull,
// UNAVAILABLE for ReasonCircuitOpen; all are NotExecuted and carry a
// retry-after hint (RetryAfter).
const (
	// ReasonRateLimited: the caller is over a rate limit (rpr limits).
	ReasonRateLimited = "RATE_LIMITED"
	// ReasonQueueFull: the service's queue is at its watermark.
	ReasonQueueFull = "QUEUE_FULL"
	// ReasonCircuitOpen: the circuit breaker for the service is open.
	ReasonCircuitOpen = "CIRCUIT_OPEN"
)

// ErrorReason returns the reason of an rpr refusal (ReasonRateLimited,
// ReasonQueueFull, ReasonCircuitOpen), and "" for any other error.
func ErrorReason(err error) string {
	e := toError(err)
	if e == nil {
		return ""
	}
	for _, d := range e.details {
		info := new(errdetails.ErrorInfo)
		if d.MessageIs(info) && d.UnmarshalTo(info) == nil && info.GetDomain() == ErrorDomain {
			return info.GetReason()
		}
	}
	return ""
}

// withRefusal adds to e, one of rpr's own refusals, its reason and when to
// try again.
func withRefusal(e *Error, reason string, after time.Duration) *Error {
	withInfo, err := e.WithDetails(
		&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(after)})
	if err != nil {
		return e
	}
	return withInfo
}
