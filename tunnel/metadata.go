package tunnel

import (
	"context"
	"strings"
	"sync"
)

// Metadata carries headers and trailers of a call: string keys, each with
// one or more values. Keys are stored lower-case, as in HTTP/2 and gRPC.
type Metadata map[string][]string

// size returns how many bytes md's keys and values hold.
func (md Metadata) size() int {
	n := 0
	for k, vs := range md {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	return n
}

// checkMetadataSize refuses metadata over MaxMetadataBytes, before
// anything is sent.
func checkMetadataSize(full, rid string, md Metadata) error {
	if n := md.size(); n > MaxMetadataBytes {
		return notExecutedf(ResourceExhausted, "%s [%s]: request metadata is %d bytes, over the %d-byte limit (tunnel.MaxMetadataBytes): send bulk data in the request message", full, rid, n, MaxMetadataBytes)
	}
	return nil
}

// Get returns the first value of key, or "".
func (md Metadata) Get(key string) string {
	if v := md[strings.ToLower(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Values returns every value of key.
func (md Metadata) Values(key string) []string { return md[strings.ToLower(key)] }

// Set replaces the values of key.
func (md Metadata) Set(key string, values ...string) {
	md[strings.ToLower(key)] = values
}

// Add appends values to key.
func (md Metadata) Add(key string, values ...string) {
	k := strings.ToLower(key)
	md[k] = append(md[k], values...)
}

// Clone returns a deep copy.
func (md Metadata) Clone() Metadata {
	out := make(Metadata, len(md))
	for k, v := range md {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// merge adds every value of other to md.
func (md Metadata) merge(other Metadata) {
	for k, v := range other {
		md.Add(k, v...)
	}
}

// HeaderFromContext returns the request headers the caller sent. In a
// handler or server interceptor, the context carries them; elsewhere the
// result is nil.
func HeaderFromContext(ctx context.Context) Metadata {
	if h := handlerInfoFrom(ctx); h != nil {
		return h.header
	}
	return nil
}

// responseMetadata collects what a handler sets with SetHeader and SetTrailer.
type responseMetadata struct {
	mu      sync.Mutex
	header  Metadata
	trailer Metadata
}

// SetHeader adds response headers from a handler; the caller reads them with
// WithResponseHeader. It fails when ctx is not a handler's context.
func SetHeader(ctx context.Context, md Metadata) error {
	return setResponseMetadata(ctx, md, func(r *responseMetadata) *Metadata { return &r.header })
}

// SetTrailer adds response trailers from a handler; the caller reads them
// with WithTrailer. It fails when ctx is not a handler's context.
func SetTrailer(ctx context.Context, md Metadata) error {
	return setResponseMetadata(ctx, md, func(r *responseMetadata) *Metadata { return &r.trailer })
}

func setResponseMetadata(ctx context.Context, md Metadata, field func(*responseMetadata) *Metadata) error {
	h := handlerInfoFrom(ctx)
	if h == nil {
		return Errorf(Internal, "SetHeader/SetTrailer called outside an rpr handler: pass the handler's context")
	}
	r := &h.response
	r.mu.Lock()
	defer r.mu.Unlock()
	dst := field(r)
	if *dst == nil {
		*dst = Metadata{}
	}
	// lower-case keys the caller may have put in by hand
	for k, v := range md {
		dst.Add(k, v...)
	}
	return nil
}
