package upstream

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Mode says how rpr ingress sends a route's requests and answers its
// callers.
type Mode string

const (
	// ModeSync waits for the upstream's whole response (the default).
	ModeSync Mode = "sync"
	// ModeStream waits for the upstream's status and headers and relays
	// the body as it arrives (downloads, server-sent events).
	ModeStream Mode = "stream"
	// ModeAsync answers 202 Accepted with a receipt at once; the egress
	// delivers the request with retries and dead-letters what fails.
	ModeAsync Mode = "async"
)

// Defaults of a route's optional fields.
const (
	DefaultMaxBodyBytes = 4 << 20
	DefaultConcurrency  = 64
	DefaultTimeout      = 30 * time.Second
	// MaxBodyLimit bounds MaxBodyBytes: a body travels in one message.
	MaxBodyLimit = 64 << 20
)

// Route is one entry of an upstream table: which requests it takes (Host
// and PathPrefix) and where an egress sends them (Upstream).
type Route struct {
	// Name identifies the route in the table and in logs.
	Name string `json:"-"`
	// Host matches the request's host, without its port: an exact name,
	// "*.example.com" for its subdomains, or empty for any host.
	Host string `json:"host,omitempty"`
	// PathPrefix matches the request's path on a segment boundary: "/api"
	// takes /api and /api/orders, not /apis. Empty means "/". For gRPC
	// tables the path is "/package.Service/Method".
	PathPrefix string `json:"path_prefix,omitempty"`
	// Upstream is where the route's requests go: http:// or https:// in
	// an HTTP table, grpc:// (cleartext HTTP/2) or grpcs:// (TLS) in a
	// gRPC table. An HTTP upstream's path is prepended to the request's.
	Upstream string `json:"upstream"`
	// StripPrefix removes PathPrefix from the path before forwarding.
	StripPrefix bool `json:"strip_prefix,omitempty"`
	// Mode is how the ingress sends the route's requests (HTTP only).
	Mode Mode `json:"mode,omitempty"`
	// Timeout is the deadline of a request that brings none (the
	// X-Rpr-Timeout header or a gRPC deadline); on a stream route, it
	// bounds the wait for the response's head, not the body. HTTP routes
	// default to DefaultTimeout; gRPC routes to none, as gRPC has none (a
	// watch may stay open for hours).
	Timeout Duration `json:"timeout,omitempty"`
	// MaxBodyBytes bounds a request's body (default DefaultMaxBodyBytes).
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty"`
	// Concurrency bounds the requests one egress has in flight to the
	// upstream (default DefaultConcurrency).
	Concurrency int `json:"concurrency,omitempty"`
	// Lane is the rpr lane whose egresses serve the route (rpr egress
	// --lane); empty is the default lane.
	Lane string `json:"lane,omitempty"`

	target *url.URL
}

// Duration is a time.Duration written as text ("10s") in JSON.
type Duration time.Duration

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: want a number with a unit, such as 10s or 1m30s", b)
	}
	*d = Duration(v)
	return nil
}

// Kind says which traffic a table carries.
type Kind int

const (
	// HTTP is a table of HTTP upstreams (http://, https://).
	HTTP Kind = iota
	// GRPC is a table of gRPC upstreams (grpc://, grpcs://).
	GRPC
)

var routeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Check validates r for a table of kind and fills in its defaults; the
// error names the field and the fix.
func (r *Route) Check(kind Kind) error {
	if !routeName.MatchString(r.Name) {
		return fmt.Errorf("route name %q: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", r.Name)
	}
	if err := r.checkMatch(); err != nil {
		return fmt.Errorf("route %s: %w", r.Name, err)
	}
	target, err := parseUpstream(r.Upstream, kind)
	if err != nil {
		return fmt.Errorf("route %s: %w", r.Name, err)
	}
	r.target = target
	switch r.Mode {
	case "":
		r.Mode = ModeSync
	case ModeSync, ModeStream, ModeAsync:
	default:
		return fmt.Errorf("route %s: mode %q: want sync, stream or async", r.Name, r.Mode)
	}
	if kind == GRPC && r.Mode != ModeSync {
		return fmt.Errorf("route %s: mode %s: gRPC routes forward calls as they are (leave mode out)", r.Name, r.Mode)
	}
	switch {
	case r.Timeout < 0:
		return fmt.Errorf("route %s: timeout %v: want a positive duration", r.Name, time.Duration(r.Timeout))
	case r.Timeout == 0 && kind == HTTP:
		r.Timeout = Duration(DefaultTimeout)
	}
	switch {
	case r.MaxBodyBytes < 0 || r.MaxBodyBytes > MaxBodyLimit:
		return fmt.Errorf("route %s: max_body_bytes %d: want 1 to %d", r.Name, r.MaxBodyBytes, MaxBodyLimit)
	case r.MaxBodyBytes == 0:
		r.MaxBodyBytes = DefaultMaxBodyBytes
	}
	switch {
	case r.Concurrency < 0:
		return fmt.Errorf("route %s: concurrency %d: want a positive number", r.Name, r.Concurrency)
	case r.Concurrency == 0:
		r.Concurrency = DefaultConcurrency
	}
	return nil
}

func (r *Route) checkMatch() error {
	r.Host = strings.ToLower(r.Host)
	if h := strings.TrimPrefix(r.Host, "*."); strings.ContainsAny(h, ":/*@ ") {
		return fmt.Errorf("host %q: give a host name without port or scheme, such as api.example.com or *.example.com", r.Host)
	}
	if r.PathPrefix == "" {
		r.PathPrefix = "/"
	}
	if !strings.HasPrefix(r.PathPrefix, "/") || strings.ContainsAny(r.PathPrefix, "?#") {
		return fmt.Errorf("path_prefix %q: give a path starting with '/', without query, such as /api", r.PathPrefix)
	}
	return nil
}

// KindOf returns the table an upstream address belongs in: gRPC for the
// grpc and grpcs schemes (in any case), HTTP for anything else, which
// Route.Check then judges.
func KindOf(rawUpstream string) Kind {
	if u, err := url.Parse(rawUpstream); err == nil && (u.Scheme == "grpc" || u.Scheme == "grpcs") {
		return GRPC
	}
	return HTTP
}

// parseUpstream checks an upstream address for a table of kind.
func parseUpstream(raw string, kind Kind) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("no upstream: give one, such as http://10.0.0.5:8080")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %v", raw, err)
	}
	schemes := map[Kind][]string{HTTP: {"http", "https"}, GRPC: {"grpc", "grpcs"}}[kind]
	ok := false
	for _, s := range schemes {
		ok = ok || u.Scheme == s
	}
	switch {
	case !ok:
		return nil, fmt.Errorf("upstream %q: want a %s:// or %s:// address", raw, schemes[0], schemes[1])
	case u.Host == "":
		return nil, fmt.Errorf("upstream %q: no host", raw)
	case u.User != nil:
		return nil, fmt.Errorf("upstream %q: credentials do not belong in the address; the egress forwards the caller's Authorization header", raw)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("upstream %q: no query or fragment, please", raw)
	case kind == GRPC && u.Path != "" && u.Path != "/":
		return nil, fmt.Errorf("upstream %q: a gRPC upstream has no path", raw)
	}
	return u, nil
}

// Target returns the checked upstream address.
func (r *Route) Target() *url.URL { return r.target }

// matchesHost reports whether host (lower case, no port) is r's.
func (r *Route) matchesHost(host string) bool {
	switch {
	case r.Host == "":
		return true
	case strings.HasPrefix(r.Host, "*."):
		return strings.HasSuffix(host, r.Host[1:])
	}
	return host == r.Host
}

// matchesPath reports whether path is under r's prefix, on a segment
// boundary.
func (r *Route) matchesPath(path string) bool {
	p := r.PathPrefix
	if !strings.HasPrefix(path, p) {
		return false
	}
	return len(path) == len(p) || strings.HasSuffix(p, "/") || path[len(p)] == '/'
}

// UpstreamPath is the path a request for path goes to upstream: without
// the prefix when StripPrefix, after the upstream's own path.
func (r *Route) UpstreamPath(path string) string {
	if r.StripPrefix && r.PathPrefix != "/" {
		path = strings.TrimPrefix(path, strings.TrimSuffix(r.PathPrefix, "/"))
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
	}
	if base := strings.TrimSuffix(r.target.Path, "/"); base != "" {
		return base + path
	}
	return path
}
