package tunnel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Rate limits. A service's limits are rules in the hash
// rpr:v1:{S}:limits, one field per rule: the field is the rule's name, the
// value a small JSON object (see LimitRule):
//
//	free-search  {"method":"pkg.Svc/Search","tier":"free","limit":10,"window":"1s","algorithm":"log"}
//	vip          {"method":"*","tier":"vip","limit":1000,"window":"1s","algorithm":"gcra"}
//
// Clients read the hash with the service state they refresh every second
// (Client.refresh), so a change applies within a second, without restarts.
// A call is checked against every rule whose method and tier match it;
// when none does, the check costs nothing (it is decided from the cached
// rules). Otherwise one script (limitScript) decides for all the matching
// rules at once, on Redis's clock: the call goes only when every rule
// admits it, and only then is it counted against each. A refusal is
// RESOURCE_EXHAUSTED, not executed, with a RetryInfo detail (RetryAfter).
// The check runs in the client, before the request enters Redis, for unary
// calls (each attempt) and async enqueues.
//
// Each rule counts per caller: its state lives in rpr:v1:{S}:rl:<rule>:<key>,
// where the key and the tier come from ClientOptions.LimitKey (default:
// the x-rpr-caller and x-rpr-tier headers). A rule for method "*" counts
// all of the service's methods together.

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

// CallerHeader and TierHeader are the request headers DefaultLimitKey
// reads the caller's identity and tier from.
const (
	CallerHeader = "x-rpr-caller"
	TierHeader   = "x-rpr-tier"
)

// DefaultTier is the tier of a caller whose LimitKey names none.
const DefaultTier = "normal"

// metricLimiterRefused counts the calls the limiter refused.
const metricLimiterRefused = "rpr.client.limiter.refused"

// LimitKeyFunc names the caller of a call for its service's rate limits:
// key is what the limits count under (a tenant, a user, an API client) and
// tier picks which rules apply ("vip", "normal", "free", ...). method is
// the full method name ("pkg.Svc/Method"); md the call's request headers
// (nil when it has none). An empty key stands for the client's ID, an empty
// tier for DefaultTier.
type LimitKeyFunc func(ctx context.Context, method string, md Metadata) (key, tier string)

// DefaultLimitKey reads the caller from the x-rpr-caller header and its
// tier from x-rpr-tier (WithHeader sets them on a call).
func DefaultLimitKey(_ context.Context, _ string, md Metadata) (key, tier string) {
	return md.Get(CallerHeader), md.Get(TierHeader)
}

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

// LimitsKey is the name of service's limits hash, for messages and
// redis-cli.
func LimitsKey(prefix, service string) string {
	return keyspace{prefix: orDefaultPrefix(prefix)}.limits(service)
}

// ListLimits reads service's rate-limit rules, sorted by name, and the
// fields of its limits hash that are not valid rules.
func ListLimits(ctx context.Context, rdb redis.UniversalClient, prefix, service string) ([]LimitRule, []InvalidLimit, error) {
	raw, err := rdb.HGetAll(ctx, LimitsKey(prefix, service)).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("rpr: read the rate limits of %s: %w", service, err)
	}
	rules, invalid := parseLimits(service, raw)
	return rules, invalid, nil
}

// SetLimit stores rule (checked and normalized, see Normalize) as a rate
// limit of service, replacing any rule of that name. Clients apply it
// within a second. It returns the rule as stored.
func SetLimit(ctx context.Context, rdb redis.UniversalClient, prefix, service string, rule LimitRule) (LimitRule, error) {
	rule, err := rule.Normalize(service)
	if err != nil {
		return LimitRule{}, err
	}
	raw, err := json.Marshal(rule)
	if err != nil {
		return LimitRule{}, err
	}
	if err := rdb.HSet(ctx, LimitsKey(prefix, service), rule.Name, raw).Err(); err != nil {
		return LimitRule{}, fmt.Errorf("rpr: store rate limit %s of %s: %w", rule.Name, service, err)
	}
	return rule, nil
}

// RemoveLimit deletes service's rule name; false when there was none.
// Clients stop applying it within a second; its counters expire within a
// window.
func RemoveLimit(ctx context.Context, rdb redis.UniversalClient, prefix, service, name string) (bool, error) {
	n, err := rdb.HDel(ctx, LimitsKey(prefix, service), name).Result()
	if err != nil {
		return false, fmt.Errorf("rpr: remove rate limit %s of %s: %w", name, service, err)
	}
	return n > 0, nil
}

// parseLimits reads a limits hash: the valid rules sorted by name, and the
// rest.
func parseLimits(service string, raw map[string]string) ([]LimitRule, []InvalidLimit) {
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

// limitRules is a service's rules as its client last read them.
type limitRules struct {
	raw   map[string]string // the hash as read, to skip parsing an unchanged one
	rules []LimitRule       // the valid ones, by name
	tiers map[string]bool   // tiers named by some rule, for metric attributes
}

// appliesTo reports whether some rule may apply to method, whatever the
// caller: only then is the caller identified and Redis asked.
func (l *limitRules) appliesTo(method string) bool {
	if l == nil {
		return false
	}
	for _, r := range l.rules {
		if r.Method == "*" || r.Method == method {
			return true
		}
	}
	return false
}

// observeLimits replaces s's cached rules with the limits hash just read,
// when it changed; invalid rules are logged and ignored.
func (c *Client) observeLimits(s *clientService, raw map[string]string) {
	if old := s.limits.Load(); old != nil && maps.Equal(old.raw, raw) {
		return
	}
	rules, invalid := parseLimits(s.name, raw)
	for _, bad := range invalid {
		c.log.Warn("rpr: ignoring an invalid rate-limit rule (fix it with rpr limits set)", "service", s.name, "rule", bad.Name, "value", bad.Raw, "error", bad.Err)
	}
	l := &limitRules{raw: raw, rules: rules, tiers: map[string]bool{}}
	for _, r := range rules {
		l.tiers[r.Tier] = true
	}
	s.limits.Store(l)
}

// limiter is the client's part of rate limiting: who the caller is, and
// the refusal counter.
type limiter struct {
	key     LimitKeyFunc
	refused metric.Int64Counter
}

// newLimiter makes the client's limiter; a MeterProvider that cannot make
// the counter gets a no-op one (metrics must never stop calls).
func newLimiter(mp metric.MeterProvider, key LimitKeyFunc) limiter {
	if key == nil {
		key = DefaultLimitKey
	}
	refused, err := meterOf(mp).Int64Counter(metricLimiterRefused,
		metric.WithDescription("Calls the client's rate limiter refused (RESOURCE_EXHAUSTED), by service, method, caller tier and rule."),
		metric.WithUnit("{call}"))
	if err != nil {
		refused = noop.Int64Counter{}
	}
	return limiter{key: key, refused: refused}
}

// maxLimitKeyBytes bounds caller keys in key names; longer ones are hashed.
const maxLimitKeyBytes = 128

// limit applies the rate limits of svc to a call of method full before it
// is sent: nothing when no rule applies (decided from the cached rules),
// otherwise one script run deciding for every matching rule. A refusal is
// RESOURCE_EXHAUSTED, not executed, with a retry-after hint.
func (c *Client) limit(ctx context.Context, svc *clientService, full, rid string, md Metadata) error {
	rules := svc.limits.Load()
	if !rules.appliesTo(full) {
		return nil
	}
	key, tier := c.limiter.key(ctx, full, md)
	if key == "" {
		key = c.opts.ID
	}
	if tier == "" {
		tier = DefaultTier
	}
	if len(key) > maxLimitKeyBytes {
		sum := sha256.Sum256([]byte(key))
		key = "sha256-" + hex.EncodeToString(sum[:16])
	}
	var keys []string
	var args []any
	var applied []LimitRule
	for _, r := range rules.rules {
		if (r.Method != "*" && r.Method != full) || (r.Tier != "*" && r.Tier != tier) {
			continue
		}
		applied = append(applied, r)
		keys = append(keys, c.keys.rateKey(svc.name, r.Name+":"+key))
		args = append(args, r.Algorithm, r.Limit, r.Window.Microseconds(), r.Burst)
	}
	if len(applied) == 0 {
		return nil
	}
	res, err := limitScript.Run(ctx, c.rdb, keys, args...).Int64Slice()
	if err == nil && len(res) != 4 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		if ctx.Err() != nil {
			return notExecutedf(CodeOf(contextError(ctx)), "%s [%s]: %v while checking its rate limit; it was not sent", full, rid, ctx.Err())
		}
		return notExecutedf(Unavailable, "%s [%s]: cannot check the rate limit in Redis: %v; the request was not sent", full, rid, err)
	}
	if res[0] == 1 {
		return nil
	}
	rule := applied[min(max(res[2], 1), int64(len(applied)))-1]
	// Round up to the millisecond: a caller waiting that long is admitted.
	after := (time.Duration(res[1])*time.Microsecond + time.Millisecond - 1).Truncate(time.Millisecond)
	if !rules.tiers[tier] {
		tier = "other" // bounded attribute values: tiers named by some rule
	}
	service, method, _ := strings.Cut(full, "/")
	c.limiter.refused.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(
		semconv.RPCService(service), semconv.RPCMethod(method),
		attribute.String("rpr.limit.tier", tier), attribute.String("rpr.limit.rule", rule.Name))))
	e := notExecutedf(ResourceExhausted, "%s [%s]: refused by rate limit %q of %s (%d calls per %v per caller, %s); not sent, retry after %v",
		full, rid, rule.Name, svc.name, rule.Limit, rule.Window, rule.Algorithm, after)
	if withInfo, err := e.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(after)}); err == nil {
		return withInfo
	}
	return e
}
