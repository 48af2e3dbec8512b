package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// A service's routing table sends calls to lanes: each lane is its own
// request queue, served by the servers that joined it, so a new version
// can take a slice of the traffic, or only the calls a header marks.
//
// The table lives in the hash rpr:v1:{S}:routes, one field per method
// pattern ("pkg.Svc/Method", or "pkg.Svc/*" for every method), each holding
// a JSON list of rules (RouteRule). A call is routed by the rules of its
// exact method pattern, then by those of the service wildcard; within a
// pattern the first rule that matches wins; when none does, the call goes
// to the default lane. A rule matches when each of its headers has the
// given value (a rule without headers always matches), and it then picks
// one of its lanes at random by weight. A change of the table is announced
// by publishing on rpr:v1:{S}:routes:changed; callers also reload the
// table every second.

// RouteRule is one rule of a route: which calls it matches and the lanes
// it sends them to.
type RouteRule struct {
	// Match lists the request headers the rule requires, by lower-case
	// key; a call matches when, for each, one of the header's values is
	// the given one. Empty matches every call.
	Match map[string]string `json:"match,omitempty"`
	// Lanes are where matching calls go, chosen at random in proportion to
	// the weights. One lane with any weight takes them all.
	Lanes []LaneWeight `json:"lanes"`
}

// LaneWeight is one lane of a rule and its share of the rule's calls.
type LaneWeight struct {
	Lane   string `json:"lane"`
	Weight int    `json:"weight"`
}

// MaxLaneWeight bounds a lane's weight in a rule. Weights are shares
// (v1:90,v2:10); the bound keeps their sum far from overflowing, which
// made a rule with huge weights send every call to its first lane, weight
// 0 or not.
const MaxLaneWeight = 1_000_000

// maxLaneLen bounds lane names, which appear in key names.
const maxLaneLen = 32

var laneName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

// ValidateLane checks a lane name: 1-32 characters of a-z, 0-9, '.', '_'
// and '-', starting with a letter or digit. "default" is the default lane.
func ValidateLane(lane string) error {
	if len(lane) > maxLaneLen || !laneName.MatchString(lane) {
		return fmt.Errorf("lane %q: want 1-%d characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit (e.g. v2, canary)", lane, maxLaneLen)
	}
	return nil
}

// Validate checks a rule's lanes and weights.
func (r RouteRule) Validate() error {
	if len(r.Lanes) == 0 {
		return errors.New("no lane (e.g. v2, or v1:90,v2:10)")
	}
	seen := map[string]bool{}
	for _, lw := range r.Lanes {
		if err := ValidateLane(lw.Lane); err != nil {
			return err
		}
		if seen[lw.Lane] {
			return fmt.Errorf("lane %q is listed twice", lw.Lane)
		}
		seen[lw.Lane] = true
		if lw.Weight < 0 || lw.Weight > MaxLaneWeight {
			return fmt.Errorf("lane %q has weight %d: want 0 to %d (weights are shares, e.g. v1:90,v2:10)", lw.Lane, lw.Weight, MaxLaneWeight)
		}
	}
	if r.TotalWeight() == 0 {
		return errors.New("the weights add up to 0; give at least one lane a weight")
	}
	for key := range r.Match {
		if key == "" || key != strings.ToLower(key) {
			return fmt.Errorf("header %q: match keys are lower-case and not empty", key)
		}
	}
	return nil
}

// String returns the rule in the form the CLI reads and writes, e.g.
// "x-canary=true => v1:90,v2:10", which ParseRouteRule reads back as the
// same rule. A header value that holds ',' or '"', starts or ends with a
// space or holds a character that does not print is written quoted, as a
// Go string literal (tenant="a,b" => v2), and so is such a key, or one
// holding '='.
func (r RouteRule) String() string {
	var b strings.Builder
	if len(r.Match) > 0 {
		for i, k := range slices.Sorted(maps.Keys(r.Match)) {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(matchText(k, "=,") + "=" + matchText(r.Match[k], ","))
		}
		b.WriteString(" => ")
	}
	for i, lw := range r.Lanes {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(lw.Lane)
		if len(r.Lanes) > 1 {
			b.WriteString(":" + strconv.Itoa(lw.Weight))
		}
	}
	return b.String()
}

// matchText is how String writes a header key or value: as it is,
// unless reading it back would change it (it holds '"' or a byte of
// stops, or starts or ends with a space) or it would not show.
func matchText(text, stops string) string {
	unprintable := strings.IndexFunc(text, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0
	if unprintable || text != strings.TrimSpace(text) || strings.ContainsAny(text, `"`+stops) {
		return strconv.Quote(text)
	}
	return text
}

// ParseRouteRule reads a rule in the form String writes and the CLI reads
// (see admin.ParseRouteRule):
//
//	v2                          every call to lane v2
//	v1:90,v2:10                 90% to v1, 10% to v2
//	x-canary=true => v2         calls whose x-canary header is "true" to v2
//	tenant=acme,x-beta=1 => v2:50,default:50
//	tenant="a,b" => v2          a value with ',', '"' or edge spaces, quoted
func ParseRouteRule(spec string) (RouteRule, error) {
	var rule RouteRule
	// The arrow is the last "=>": lanes and weights never hold '=', but a
	// header value may ("x=>2 => v2" matches x: ">2").
	match, lanes, hasMatch := "", spec, false
	if i := strings.LastIndex(spec, "=>"); i >= 0 {
		match, lanes, hasMatch = spec[:i], spec[i+len("=>"):], true
	}
	if hasMatch {
		m, err := parseMatch(match)
		if err != nil {
			return RouteRule{}, fmt.Errorf("route rule %q: %w", spec, err)
		}
		rule.Match = m
	}
	if !hasMatch && strings.Contains(lanes, "=") {
		return RouteRule{}, fmt.Errorf("route rule %q: a header match needs \"=> lane\" after it (e.g. %q)", spec, strings.TrimSpace(lanes)+" => v2")
	}
	for _, part := range strings.Split(lanes, ",") {
		part = strings.TrimSpace(part)
		lane, weightText, weighted := strings.Cut(part, ":")
		weight := 1
		if weighted {
			w, err := strconv.Atoi(strings.TrimSpace(weightText))
			if err != nil || w < 0 {
				return RouteRule{}, fmt.Errorf("route rule %q: weight of lane %q must be a whole number ≥ 0 (e.g. v1:90,v2:10)", spec, lane)
			}
			weight = w
		}
		rule.Lanes = append(rule.Lanes, LaneWeight{Lane: strings.TrimSpace(lane), Weight: weight})
	}
	if err := rule.Validate(); err != nil {
		return RouteRule{}, fmt.Errorf("route rule %q: %w", spec, err)
	}
	return rule, nil
}

// parseMatch reads the header conditions before a rule's arrow:
// key=value, separated by ','. A key or value is trimmed of spaces,
// unless it starts with '"': then it is a Go string literal, as String
// writes one that holds ',' or '"' or starts or ends with a space.
func parseMatch(match string) (map[string]string, error) {
	m := map[string]string{}
	rest := match
	for {
		key, tail, err := matchToken(rest, "=,", "key", "'='")
		if err != nil {
			return nil, err
		}
		if key == "" || !strings.HasPrefix(tail, "=") {
			cond, _, _ := strings.Cut(rest, ",")
			return nil, fmt.Errorf("header condition %q is not key=value (e.g. x-canary=true => v2)", strings.TrimSpace(cond))
		}
		key = strings.ToLower(key)
		if _, twice := m[key]; twice {
			return nil, fmt.Errorf("header %q has two conditions; a rule matches one value per header (write a rule for each value)", key)
		}
		value, tail, err := matchToken(tail[1:], ",", "value", `',' and the next condition, or "=>"`)
		if err != nil {
			return nil, fmt.Errorf("header %q: %w", key, err)
		}
		m[key] = value
		if tail == "" {
			return m, nil
		}
		rest = tail[1:] // past the ','
	}
}

// matchToken reads a key or value (what) at the start of s: a Go string
// literal when s starts, after spaces, with '"', else the text up to the
// first byte of stops, trimmed of spaces. The rest of s is "" or starts
// with a byte of stops; want says what may follow a quoted one, for the
// error when something else does.
func matchToken(s, stops, what, want string) (token, rest string, err error) {
	quoted := strings.TrimLeftFunc(s, unicode.IsSpace)
	if !strings.HasPrefix(quoted, `"`) {
		end := strings.IndexAny(s, stops)
		if end < 0 {
			end = len(s)
		}
		return strings.TrimSpace(s[:end]), s[end:], nil
	}
	literal, err := strconv.QuotedPrefix(quoted)
	if err != nil {
		return "", "", fmt.Errorf("the quoted %s %s is not a complete quoted string: close it, as a Go string literal (e.g. tenant=\"a,b\")", what, strings.TrimSpace(quoted))
	}
	token, _ = strconv.Unquote(literal)
	rest = strings.TrimLeftFunc(quoted[len(literal):], unicode.IsSpace)
	if rest != "" && !strings.ContainsRune(stops, rune(rest[0])) {
		return "", "", fmt.Errorf("%q follows the quoted %s %s; want %s", strings.TrimSpace(rest), what, literal, want)
	}
	return token, rest, nil
}

// Matches reports whether a call with header satisfies the rule's Match.
func (r RouteRule) Matches(header Metadata) bool {
	for key, want := range r.Match {
		if !slices.Contains(header[key], want) {
			return false
		}
	}
	return true
}

// TotalWeight adds up the weights of the rule's lanes.
func (r RouteRule) TotalWeight() int {
	total := 0
	for _, lw := range r.Lanes {
		total += lw.Weight
	}
	return total
}

// Pick chooses one of the rule's lanes by weight; roll is uniform in
// [0, 1).
func (r RouteRule) Pick(roll float64) string {
	n := int(roll * float64(r.TotalWeight()))
	for _, lw := range r.Lanes {
		if n < lw.Weight {
			return lw.Lane
		}
		n -= lw.Weight
	}
	return r.Lanes[len(r.Lanes)-1].Lane
}

// RouteTable is a service's routing table: method pattern -> rules.
type RouteTable map[string][]RouteRule

// Resolve returns the rule a call to method ("Method") with header goes
// by, and its route's pattern: the first rule that matches, of the exact
// method's route, then of the service wildcard's. nil: no rule matched,
// the call goes to the default lane.
func (t RouteTable) Resolve(service, method string, header Metadata) (pattern string, index int, rule *RouteRule) {
	for _, pattern := range [...]string{service + "/" + method, service + "/*"} {
		rules := t[pattern]
		for i := range rules {
			if rules[i].Matches(header) {
				return pattern, i, &rules[i]
			}
		}
	}
	return "", -1, nil
}

// Lanes returns every lane the table names, sorted.
func (t RouteTable) Lanes() []string {
	set := map[string]bool{}
	for _, rules := range t {
		for _, r := range rules {
			for _, lw := range r.Lanes {
				if lw.Weight > 0 {
					set[lw.Lane] = true
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// ParseRouteTable decodes the routes hash; fields that do not decode are
// reported and skipped, so one bad entry does not stop the others.
func ParseRouteTable(service string, hash map[string]string) (RouteTable, []error) {
	table := RouteTable{}
	var errs []error
	for pattern, raw := range hash {
		if err := ValidatePattern(service, pattern); err != nil {
			errs = append(errs, err)
			continue
		}
		var rules []RouteRule
		if err := json.Unmarshal([]byte(raw), &rules); err != nil {
			errs = append(errs, fmt.Errorf("route %s: not a JSON list of rules: %w (fix it with `rpr routes set`)", pattern, err))
			continue
		}
		bad := false
		for _, r := range rules {
			if err := r.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("route %s: %w (fix it with `rpr routes set`)", pattern, err))
				bad = true
			}
		}
		if !bad && len(rules) > 0 {
			table[pattern] = rules
		}
	}
	return table, errs
}

// ValidatePattern checks a method pattern of service's table.
func ValidatePattern(service, pattern string) error {
	svc, method, ok := strings.Cut(pattern, "/")
	switch {
	case !ok || method == "":
		return fmt.Errorf("route pattern %q: want %s/Method or %s/*", pattern, service, service)
	case svc != service:
		return fmt.Errorf("route pattern %q is not of service %s (want %s/Method or %s/*)", pattern, service, service, service)
	case method != "*" && strings.ContainsAny(method, "*/{} "):
		return fmt.Errorf("route pattern %q: a method is an exact name, or * for all of them", pattern)
	}
	return nil
}
