package upstream

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
)

// Table is one version of an upstream table, ready to match requests. It
// never changes once built: a reader swaps in a new Table.
type Table struct {
	Kind    Kind
	Version int64
	routes  []*Route // most specific first
	// Invalid holds the entries that could not be used, by name, with
	// why: they match nothing, and the rest of the table still works.
	Invalid map[string]error
}

// NewTable checks routes and builds a table of kind from the valid ones;
// the others are in Invalid.
func NewTable(kind Kind, version int64, routes []Route) *Table {
	t := &Table{Kind: kind, Version: version, Invalid: map[string]error{}}
	for i := range routes {
		r := routes[i]
		if err := r.Check(kind); err != nil {
			t.Invalid[r.Name] = err
			continue
		}
		t.routes = append(t.routes, &r)
	}
	slices.SortFunc(t.routes, func(a, b *Route) int {
		if d := hostRank(b.Host) - hostRank(a.Host); d != 0 {
			return d
		}
		if d := len(b.PathPrefix) - len(a.PathPrefix); d != 0 {
			return d
		}
		return strings.Compare(a.Name, b.Name)
	})
	return t
}

// hostRank orders host patterns from the most specific: exact names, then
// wildcards by length, then any host.
func hostRank(host string) int {
	switch {
	case host == "":
		return 0
	case strings.HasPrefix(host, "*."):
		return len(host)
	}
	return 1 << 20
}

// Len returns how many valid routes the table has.
func (t *Table) Len() int { return len(t.routes) }

// Routes returns a copy of the table's valid routes, most specific first.
func (t *Table) Routes() []Route {
	out := make([]Route, len(t.routes))
	for i, r := range t.routes {
		out[i] = *r
	}
	return out
}

// Match returns the route for a request to host (a Host header, port
// allowed) and path: the one with the most specific host, then the
// longest path prefix, then the first name.
func (t *Table) Match(host, path string) (*Route, bool) {
	if t == nil {
		return nil, false
	}
	host = strings.ToLower(host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(host, ".")
	for _, r := range t.routes {
		if r.matchesHost(host) && r.matchesPath(path) {
			return r, true
		}
	}
	return nil, false
}

// DecodePath checks an escaped request path before it is matched against
// a table, and returns it decoded: it must be absolute, decode, and have
// no dot segment ("." or "..", escaped or not), which an upstream would
// resolve to a path outside the route's prefix (/inventory/../admin).
// Clients normalise such paths before sending; a request that did not is
// refused rather than rewritten, so that what the caller sent and what
// the upstream got never differ.
func DecodePath(escaped string) (string, error) {
	decoded, err := url.PathUnescape(escaped)
	if err != nil || !strings.HasPrefix(escaped, "/") {
		return "", fmt.Errorf("path %q is not an escaped absolute path", escaped)
	}
	for _, seg := range strings.Split(strings.ReplaceAll(decoded, `\`, "/"), "/") {
		if seg == "." || seg == ".." {
			return "", fmt.Errorf("path %q has a dot segment (%q): send the path normalised (without . and .. segments)", escaped, seg)
		}
	}
	return decoded, nil
}
