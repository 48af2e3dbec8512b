package tunnel

import (
	"fmt"

	"github.com/rprtunnel/rpr/internal/wire"
)

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

// String returns the code's canonical upper-case name, e.g. "NOT_FOUND".
func (c Code) String() string { return wire.CodeName(uint32(c)) }

// ParseCode reads a code from its canonical name ("NOT_FOUND") or number.
func ParseCode(s string) (Code, bool) {
	n, ok := wire.ParseCode(s)
	return Code(n), ok
}

// MarshalText writes the code's canonical name, so that a Code in JSON,
// YAML or a flag reads "NOT_FOUND" rather than 5.
func (c Code) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads a code from its canonical name or number, as
// ParseCode does.
func (c *Code) UnmarshalText(text []byte) error {
	code, ok := ParseCode(string(text))
	if !ok {
		return fmt.Errorf("rpr: %q is not a status code; use a name such as \"UNAVAILABLE\" or a number from 0 to 16", text)
	}
	*c = code
	return nil
}
