package tunnel

import "strconv"

// Code is a status code. rpr uses gRPC's code set and numbering, so codes
// mean the same thing on both sides of a gateway and in dashboards.
type Code uint32

// The status codes, numbered as in gRPC.
const (
	OK                 Code = 0  // Not an error.
	Canceled           Code = 1  // The caller cancelled the call.
	Unknown            Code = 2  // An error without a code.
	InvalidArgument    Code = 3  // The request is invalid whatever the server's state.
	DeadlineExceeded   Code = 4  // The deadline passed before an answer arrived.
	NotFound           Code = 5  // Some requested entity was not found.
	AlreadyExists      Code = 6  // The entity a caller tried to create exists.
	PermissionDenied   Code = 7  // The caller may not do this.
	ResourceExhausted  Code = 8  // A quota, limit or size was exceeded.
	FailedPrecondition Code = 9  // The system is not in the state the call needs.
	Aborted            Code = 10 // The operation was aborted (e.g. outcome unknown).
	OutOfRange         Code = 11 // A value is past the valid range.
	Unimplemented      Code = 12 // The method is not implemented by the server.
	Internal           Code = 13 // An invariant was broken (e.g. a handler panicked).
	Unavailable        Code = 14 // The service cannot be reached now; retrying may work.
	DataLoss           Code = 15 // Unrecoverable data loss or corruption.
	Unauthenticated    Code = 16 // The caller has no valid credentials.
)

var codeNames = [...]string{
	OK:                 "OK",
	Canceled:           "CANCELED",
	Unknown:            "UNKNOWN",
	InvalidArgument:    "INVALID_ARGUMENT",
	DeadlineExceeded:   "DEADLINE_EXCEEDED",
	NotFound:           "NOT_FOUND",
	AlreadyExists:      "ALREADY_EXISTS",
	PermissionDenied:   "PERMISSION_DENIED",
	ResourceExhausted:  "RESOURCE_EXHAUSTED",
	FailedPrecondition: "FAILED_PRECONDITION",
	Aborted:            "ABORTED",
	OutOfRange:         "OUT_OF_RANGE",
	Unimplemented:      "UNIMPLEMENTED",
	Internal:           "INTERNAL",
	Unavailable:        "UNAVAILABLE",
	DataLoss:           "DATA_LOSS",
	Unauthenticated:    "UNAUTHENTICATED",
}

// String returns the code's canonical upper-case name, e.g. "NOT_FOUND".
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "CODE(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// ParseCode reads a code from its canonical name ("NOT_FOUND") or number.
func ParseCode(s string) (Code, bool) {
	for i, name := range codeNames {
		if name == s {
			return Code(i), true
		}
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n >= uint64(len(codeNames)) {
		return 0, false
	}
	return Code(n), true
}
