// Package headers converts HTTP headers to and from the rpr.tunnel.v1
// messages and removes what must not cross a proxy: the hop-by-hop
// headers of RFC 9110 section 7.6.1, and those a Connection header names.
package headers

import (
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	tunnelv1 "github.com/rprtunnel/rpr/gen/rpr/tunnel/v1"
)

// hopByHop are the headers that concern one connection only.
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// EndToEnd returns a copy of h without its hop-by-hop headers.
func EndToEnd(h http.Header) http.Header {
	out := h.Clone()
	if out == nil {
		return http.Header{}
	}
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				out.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		out.Del(name)
	}
	return out
}

// ToProto returns h as messages, sorted by name for stable output.
func ToProto(h http.Header) []*tunnelv1.Header {
	out := make([]*tunnelv1.Header, 0, len(h))
	for name, values := range h {
		out = append(out, &tunnelv1.Header{Name: name, Values: values})
	}
	slices.SortFunc(out, func(a, b *tunnelv1.Header) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// FromProto returns the messages as a header, names canonicalised.
func FromProto(hs []*tunnelv1.Header) http.Header {
	out := make(http.Header, len(hs))
	for _, h := range hs {
		name := textproto.CanonicalMIMEHeaderKey(h.GetName())
		out[name] = append(out[name], h.GetValues()...)
	}
	return out
}
