package grpcraw

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/rprtunnel/rpr/tunnel"
)

// The rpr headers of a forwarded call, besides the caller's metadata.
const (
	// MethodHeader is the call's full method, "/package.Service/Method".
	MethodHeader = "rpr-grpc-method"
	// AuthorityHeader is the :authority the caller sent to the ingress;
	// the egress matches its routes' hosts against it.
	AuthorityHeader = "rpr-grpc-authority"
	// ContentSubtypeHeader is the caller's content-subtype ("json" for
	// application/grpc+json), when it named one other than proto.
	ContentSubtypeHeader = "rpr-grpc-content-subtype"
	// RequestIDKey carries the rpr request id to the upstream (request
	// metadata) and back to the caller (trailer metadata).
	RequestIDKey = "x-rpr-request-id"
	// OutcomeKey is a trailer of a failed call: whether the upstream may
	// have run it, "not executed" when rpr can prove it did not, as the
	// HTTP ingress's X-Rpr-Outcome header.
	OutcomeKey = "x-rpr-outcome"
	// HopsKey counts the rpr tunnels a call has crossed: an ingress
	// refuses a call that crossed too many (a forwarding loop; see
	// upstream.HopsHeader, its HTTP form) and passes the count on in the
	// rpr call's header under the same key, and the egress sets it on the
	// upstream call to one more.
	HopsKey = "x-rpr-hops"
)

// Forwarded reports whether metadata key crosses the tunnel, in either
// direction. Kept back: rpr's own headers (rpr-*, x-rpr-*), which only
// rpr sets (a caller must not choose its rate-limit identity,
// x-rpr-caller, or the method the egress calls); the trace context (traceparent, tracestate), which rpr's spans
// carry instead, so the upstream's span is a child of the egress's;
// gRPC's reserved keys (grpc-*, pseudo-headers, content-type, te), which
// each gRPC hop writes for itself.
func Forwarded(key string) bool {
	switch {
	case key == "", key[0] == ':',
		strings.HasPrefix(key, "rpr-"), strings.HasPrefix(key, "x-rpr-"), strings.HasPrefix(key, "grpc-"):
		return false
	}
	switch key {
	case "content-type", "te", "traceparent", "tracestate", "connection", "keep-alive", "upgrade", "transfer-encoding", "proxy-connection":
		return false
	}
	return true
}

// ToTunnel returns the keys of md that cross the tunnel, as rpr
// metadata. Binary ("-bin") values are raw bytes on both sides.
func ToTunnel(md metadata.MD) tunnel.Metadata {
	out := make(tunnel.Metadata, len(md))
	for k, vs := range md {
		if k = strings.ToLower(k); Forwarded(k) {
			out[k] = append(out[k], vs...)
		}
	}
	return out
}

// ToGRPC returns the keys of md that cross the tunnel, as gRPC metadata.
// It refuses what gRPC would: a key outside [0-9a-z-_.], or a value of a
// key without the -bin suffix that is not printable ASCII, naming it.
func ToGRPC(md tunnel.Metadata) (metadata.MD, error) {
	out := make(metadata.MD, len(md))
	for k, vs := range md {
		k = strings.ToLower(k)
		if !Forwarded(k) {
			continue
		}
		if err := validKey(k); err != nil {
			return nil, err
		}
		if !strings.HasSuffix(k, "-bin") {
			for _, v := range vs {
				if err := validValue(k, v); err != nil {
					return nil, err
				}
			}
		}
		out[k] = append(out[k], vs...)
	}
	return out, nil
}

func validKey(k string) error {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("metadata key %q: gRPC takes only 0-9 a-z - _ . in keys", k)
		}
	}
	return nil
}

func validValue(k, v string) error {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("metadata %q: byte %#x at %d: gRPC takes printable ASCII only in values of keys without the -bin suffix", k, c, i)
		}
	}
	return nil
}

// Carrier reads and writes W3C trace context (or any
// propagation.TextMapPropagator's keys) in gRPC metadata.
type Carrier metadata.MD

// Get returns the first value of key.
func (c Carrier) Get(key string) string {
	if vs := metadata.MD(c).Get(key); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// Set replaces the values of key.
func (c Carrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

// Keys returns the keys present.
func (c Carrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}
