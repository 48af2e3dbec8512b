package tunnel

import (
	"context"
	"fmt"
)

// handlerInfo is what a handler's context carries about the request it
// serves: read by HeaderFromContext, RequestIDFromContext,
// AttemptFromContext and IdempotencyKeyFromContext, and written by
// SetHeader and SetTrailer. It travels as one context value, so a request
// costs one context layer rather than one per accessor.
type handlerInfo struct {
	header         Metadata
	id             string
	attempt        int
	idempotencyKey string // async requests only
	response       responseMetadata
}

type handlerInfoKey struct{}

// withHandlerInfo returns ctx carrying info.
func withHandlerInfo(ctx context.Context, info *handlerInfo) context.Context {
	return context.WithValue(ctx, handlerInfoKey{}, info)
}

// infoContext is what withHandlerInfo returns, as a type a request can
// hold inside itself instead of an allocation of its own: its Context's
// context, carrying info. Everything but the value is its parent's, as
// with context.WithValue, so deadlines, cancellation and context.Cause
// reach the handler unchanged.
type infoContext struct {
	context.Context
	info *handlerInfo
}

func (c *infoContext) Value(key any) any {
	if _, ok := key.(handlerInfoKey); ok {
		return c.info
	}
	return c.Context.Value(key)
}

// String names the context as context.WithValue's would be named.
func (c *infoContext) String() string {
	return fmt.Sprintf("%v.WithValue(rpr handler info)", c.Context)
}

// handlerInfoFrom returns the handlerInfo ctx carries, nil outside a
// handler.
func handlerInfoFrom(ctx context.Context) *handlerInfo {
	info, _ := ctx.Value(handlerInfoKey{}).(*handlerInfo)
	return info
}
