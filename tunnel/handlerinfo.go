package tunnel

import "context"

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

// handlerInfoFrom returns the handlerInfo ctx carries, nil outside a
// handler.
func handlerInfoFrom(ctx context.Context) *handlerInfo {
	info, _ := ctx.Value(handlerInfoKey{}).(*handlerInfo)
	return info
}
