package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A service's rate limits are rules in its limits hash
// (rpr:v1:{S}:limits), one field per rule: the field is the rule's name,
// the value its JSON form (LimitRule):
//
//	free-search  {"method":"pkg.Svc/Search","tier":"free","limit":10,"window":"1s","algorithm":"log"}
//	vip          {"method":"*","tier":"vip","limit":1000,"window":"1s","algorithm":"gcra"}
//
// A caller checks a call against every rule whose method and tier match
// it, all at once in one script run on Redis's clock; the rule's state for
// one caller lives in rpr:v1:{S}:rl:<rule>:<caller key>.

// Rate-limit algorithms (LimitRule.Algorithm).
const (
	// LimitLog is the exact sliding log: a sorted set of the Redis times of
	// the calls admitted in the last window. Exact: no window of the
	// rule's length, wherever it starts, holds more than Limit admitted
	// calls. Memory O(Limit) per caller key: one entry per admitted call
	// still in the window, measured on Redis 7 at about 24 bytes each
	// while a key holds at most 128 (the listpack encoding; 1 KB for 50)
	// and about 130 bytes each beyond (the skiplist; 1.3 MB for 10,000);
	// Limit is capped at MaxLogLimit.
	LimitLog = "log"
	// LimitGCRA is the generic cell rate algorithm: one string per caller
	// key holding the theoretical arrival time (about 90 bytes with its
	// key name, whatever the limit). It spaces calls Window/Limit apart and lets Burst
	// (default Limit) through at once after a quiet spell. Exact in the
	// long run (never more than Burst + d·Limit/Window calls in any span
	// d), but a window of the rule's length may hold up to Limit+Burst-1
	// calls: a full burst then the calls that refill during the window.
	// With Burst 1 it is exact in every window too, at the price of no
	// bursts at all.
	LimitGCRA = "gcra"
)

// MaxLogLimit caps Limit for the sliding log, whose memory grows with it;
// use LimitGCRA for higher limits.
const MaxLogLimit = 100_000

// LimitRule is one rate limit of a service: at most Limit calls per
// Window by each caller of the given tier to the given method. Its JSON
// form, stored in the service's limits hash under the rule's name, is
//
//	{"method": "pkg.Svc/Method" | "*", "tier": "vip" | "*", "limit": 100,
//	 "window": "1s", "algorithm": "log" | "gcra", "burst": 100}
//
// where window is a Go duration, algorithm defaults to "log" and burst
// (gcra only) to limit.
type LimitRule struct {
	// Name names the rule: 1-64 letters, digits, '.', '_' or '-'.
	Name string
	// Method is the full method name the rule applies to ("pkg.Svc/Search";
	// SetLimit also accepts the short "Search"), or "*" for all the
	// service's methods, counted together.
	Method string
	// Tier is the caller tier the rule applies to, or "*" for every tier.
	Tier string
	// Limit is how many calls each caller may make per Window.
	Limit int64
	// Window is the length of the sliding window, from 1ms to 24h.
	Window time.Duration
	// Algorithm is LimitLog (default) or LimitGCRA.
	Algorithm string
	// Burst is how many calls GCRA lets through at once, 1 to Limit
	// (default Limit). Not used by the log.
	Burst int64
}

// limitRuleJSON is LimitRule's stored form.
type limitRuleJSON struct {
	Method    string `json:"method"`
	Tier      string `json:"tier"`
	Limit     int64  `json:"limit"`
	Window    string `json:"window"`
	Algorithm string `json:"algorithm"`
	Burst     int64  `json:"burst,omitempty"`
}

// MarshalJSON writes the rule's stored form (without its name, which is
// the hash field).
func (r LimitRule) MarshalJSON() ([]byte, error) {
	return json.Marshal(limitRuleJSON{Method: r.Method, Tier: r.Tier, Limit: r.Limit,
		Window: r.Window.String(), Algorithm: r.Algorithm, Burst: r.Burst})
}

// UnmarshalJSON reads the stored form; it does not check the values
// (ParseLimitRule does).
func (r *LimitRule) UnmarshalJSON(b []byte) error {
	var w limitRuleJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	d, err := time.ParseDuration(w.Window)
	if err != nil {
		return &LimitRuleError{Field: "window", Value: w.Window, Problem: "is not a duration", Example: "1s"}
	}
	*r = LimitRule{Name: r.Name, Method: w.Method, Tier: w.Tier, Limit: w.Limit, Window: d, Algorithm: w.Algorithm, Burst: w.Burst}
	return nil
}

// String describes the rule in one line.
func (r LimitRule) String() string {
	s := fmt.Sprintf("%d calls per %v per caller, method %s, tier %s, %s", r.Limit, r.Window, r.Method, r.Tier, r.Algorithm)
	if r.Algorithm == LimitGCRA {
		s += fmt.Sprintf(" (burst %d)", r.Burst)
	}
	return s
}

// LimitRuleError says which field of a LimitRule is wrong and what a good
// value looks like.
type LimitRuleError struct {
	Field   string // "name", "method", "tier", "limit", "window", "algorithm" or "burst"
	Value   string
	Problem string
	Example string
}

func (e *LimitRuleError) Error() string {
	return fmt.Sprintf("%s %q %s, e.g. %s", e.Field, e.Value, e.Problem, e.Example)
}

var limitNamePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ParseLimitRule reads a rule of service as stored in its limits hash:
// name is the field, raw the value. It checks the rule and fills in its
// defaults, as Normalize does.
func ParseLimitRule(service, name, raw string) (LimitRule, error) {
	r := LimitRule{Name: name}
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		var re *LimitRuleError
		if errors.As(err, &re) {
			return LimitRule{}, re
		}
		return LimitRule{}, fmt.Errorf("not a rule (%v); want e.g. {\"method\":\"*\",\"tier\":\"*\",\"limit\":100,\"window\":\"1s\",\"algorithm\":\"log\"}", err)
	}
	return r.Normalize(service)
}

// Normalize checks r as a rule of service and returns it with its defaults
// filled in: the full method name for a short one, tier "*" when empty,
// the log algorithm when none is named, and GCRA's burst. Its errors are
// *LimitRuleError.
func (r LimitRule) Normalize(service string) (LimitRule, error) {
	bad := func(field, value, problem, example string) (LimitRule, error) {
		return LimitRule{}, &LimitRuleError{Field: field, Value: value, Problem: problem, Example: example}
	}
	if !limitNamePattern.MatchString(r.Name) {
		return bad("name", r.Name, "must be 1-64 letters, digits, '.', '_' or '-'", "free-search")
	}
	switch m := r.Method; {
	case m == "" || m == "*":
		r.Method = "*"
	case !strings.Contains(m, "/"):
		if strings.ContainsAny(m, "* {}") {
			return bad("method", m, "is not a method name", service+"/Search or *")
		}
		r.Method = service + "/" + m
	default:
		svc, name, _ := strings.Cut(m, "/")
		if svc != service {
			return bad("method", m, "names a method of another service than "+service, service+"/"+name)
		}
		if name == "" || strings.ContainsAny(name, "/* {}") {
			return bad("method", m, "is not a method name", service+"/Search or *")
		}
	}
	switch t := r.Tier; {
	case t == "" || t == "*":
		r.Tier = "*"
	case !limitNamePattern.MatchString(t):
		return bad("tier", t, "must be * or 1-64 letters, digits, '.', '_' or '-'", "vip")
	}
	switch r.Algorithm {
	case "":
		r.Algorithm = LimitLog
	case LimitLog, LimitGCRA:
	default:
		return bad("algorithm", r.Algorithm, "is not an algorithm: want log (exact sliding log) or gcra (constant memory)", "gcra")
	}
	if r.Window < time.Millisecond || r.Window > 24*time.Hour {
		return bad("window", r.Window.String(), "must be from 1ms to 24h", "1s")
	}
	maxLimit := int64(1_000_000_000)
	if r.Algorithm == LimitLog {
		maxLimit = MaxLogLimit
	}
	switch {
	case r.Limit < 1:
		return bad("limit", strconv.FormatInt(r.Limit, 10), "must be at least 1", "100")
	case r.Limit > maxLimit && r.Algorithm == LimitLog:
		return bad("limit", strconv.FormatInt(r.Limit, 10), fmt.Sprintf("is over %d, the most the sliding log keeps per caller (its memory grows with the limit); use the gcra algorithm", MaxLogLimit), "100000")
	case r.Limit > maxLimit:
		return bad("limit", strconv.FormatInt(r.Limit, 10), fmt.Sprintf("is over %d", maxLimit), "100000")
	case r.Algorithm == LimitGCRA && r.Window.Microseconds() < r.Limit:
		return bad("limit", strconv.FormatInt(r.Limit, 10), fmt.Sprintf("is more than one call per microsecond over %v", r.Window), "1000")
	}
	switch {
	case r.Algorithm == LimitLog && r.Burst != 0:
		return bad("burst", strconv.FormatInt(r.Burst, 10), "applies to the gcra algorithm only (leave it out for log)", "0")
	case r.Algorithm == LimitGCRA && r.Burst == 0:
		r.Burst = r.Limit
	case r.Algorithm == LimitGCRA && (r.Burst < 1 || r.Burst > r.Limit):
		return bad("burst", strconv.FormatInt(r.Burst, 10), fmt.Sprintf("must be from 1 to the limit (%d)", r.Limit), strconv.FormatInt(r.Limit, 10))
	}
	return r, nil
}

// InvalidLimit is a field of a limits hash that is not a valid rule;
// clients ignore it (and log a warning when they read it).
type InvalidLimit struct {
	Name string
	Raw  string
	Err  error
}

// ParseLimits reads a limits hash: the valid rules sorted by name, and the
// rest.
func ParseLimits(service string, raw map[string]string) ([]LimitRule, []InvalidLimit) {
	var rules []LimitRule
	var invalid []InvalidLimit
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		r, err := ParseLimitRule(service, name, raw[name])
		if err != nil {
			invalid = append(invalid, InvalidLimit{Name: name, Raw: raw[name], Err: err})
			continue
		}
		rules = append(rules, r)
	}
	return rules, invalid
}
