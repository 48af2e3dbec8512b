package tunnel

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Error is an rpr status: a code, a message and optional protobuf details.
// Handlers return one (usually through Errorf) to choose the code the caller
// sees; clients receive one for every failed call.
type Error struct {
	code    Code
	message string
	details []*anypb.Any
	cause   error
	// notExecuted: the request provably never ran and never will.
	notExecuted bool
	// local: made by this client before any server answered.
	local bool
	// call names the call, "pkg.Service/Method [request id]", on the
	// calling side: Error puts it before a message that lacks it.
	call string
}

// notExecutedf returns a client-side error for a request that provably was
// not and will not be executed.
func notExecutedf(code Code, format string, args ...any) *Error {
	return &Error{code: code, message: fmt.Sprintf(format, args...), notExecuted: true, local: true}
}

// errNeverSent is the cause of an error for a call that ended, by its
// caller's context, before its request was sent: it says nothing of the
// service or of Redis, so no circuit breaker counts it.
var errNeverSent = errors.New("never sent")

// notSent returns the error of a call whose context ended (already, or
// while it was being prepared) before its request was sent: the code
// matches ctx.Err(), and it is NotExecuted.
func notSent(ctx context.Context, full, rid, when string) *Error {
	e := notExecutedf(contextCode(ctx), "%s [%s]: %v %s; the request was not sent", full, rid, ctx.Err(), when)
	e.cause = errNeverSent
	return e
}

// NotExecuted reports whether err says the request provably did not run
// and never will: it never left the client, or the client marked it
// TIMEOUT/CANCELLED in Redis before any worker claimed it. Such a call is
// safe to retry whatever the method does. When NotExecuted is false for a
// DEADLINE_EXCEEDED, CANCELED or ABORTED error, the request may have run
// (the message says what is known).
func NotExecuted(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.notExecuted
}

// Errorf returns an *Error with the given code and a formatted message. In a
// handler, it is how you tell the caller what went wrong:
//
//	return nil, tunnel.Errorf(tunnel.NotFound, "order %q not found", id)
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{code: code, message: fmt.Sprintf(format, args...)}
}

// NewError wraps err with a code. The caller sees err's text as the message;
// errors.Is and errors.As still reach err on this side.
func NewError(code Code, err error) *Error {
	return &Error{code: code, message: err.Error(), cause: err}
}

// Code returns the status code.
func (e *Error) Code() Code { return e.code }

// Message returns the message without the code.
func (e *Error) Message() string { return e.message }

// Error formats the status as "rpr: CODE: pkg.Service/Method [request id]:
// message" on the calling side, so that every error a Client returns
// names its call; a handler's own errors, before they are sent, read
// "rpr: CODE: message". Message returns the message alone.
func (e *Error) Error() string {
	if e.call != "" && !strings.HasPrefix(e.message, e.call) {
		return "rpr: " + e.code.String() + ": " + e.call + ": " + e.message
	}
	return "rpr: " + e.code.String() + ": " + e.message
}

// withCall returns err naming the call full [rid] when err is an *Error
// that does not name one yet. The *Error is copied, never changed: the
// same value may be returned to several calls.
func withCall(err error, full, rid string) error {
	e, ok := err.(*Error)
	if !ok || e.call != "" {
		return err
	}
	out := *e
	out.call = full + " [" + rid + "]"
	return &out
}

// Unwrap returns the error NewError wrapped, if any.
func (e *Error) Unwrap() error { return e.cause }

// Details returns the protobuf details attached to the status.
func (e *Error) Details() []*anypb.Any { return e.details }

// WithDetails returns a copy of e carrying the given messages as details
// (for example errdetails.BadRequest); an *anypb.Any is taken as the
// detail itself, type URL and bytes unchanged, so a proxy can pass on
// details of types it does not link. It fails only if a message cannot be
// marshalled.
func (e *Error) WithDetails(msgs ...proto.Message) (*Error, error) {
	out := *e
	out.details = append([]*anypb.Any(nil), e.details...)
	for _, m := range msgs {
		if a, ok := m.(*anypb.Any); ok {
			out.details = append(out.details, a) // already a detail: kept as it is
			continue
		}
		a, err := anypb.New(m)
		if err != nil {
			return nil, fmt.Errorf("rpr: marshal error detail %T: %w", m, err)
		}
		out.details = append(out.details, a)
	}
	return &out, nil
}

// CodeOf returns the status code of err: OK for nil, the code of an *Error
// found with errors.As, DeadlineExceeded or Canceled for the context errors,
// and Unknown for anything else.
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.code
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return Canceled
	}
	return Unknown
}

// AsError returns the *Error that err is or wraps, and true; for any other
// error it returns an *Error made from it (CodeOf's code, err's text as the
// message, err reachable with errors.Is and errors.As) and false. It
// returns nil and false for nil.
func AsError(err error) (*Error, bool) {
	if err == nil {
		return nil, false
	}
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return NewError(CodeOf(err), err), false
}

// toError is AsError's *Error alone.
func toError(err error) *Error {
	e, _ := AsError(err)
	return e
}
