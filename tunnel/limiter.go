package tunnel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// Rate limits. A service's limits are rules in the hash
// rpr:v1:{S}:limits, one field per rule: the field is the rule's name, the
// value a small JSON object (operators set them with admin.Limits, or
// `rpr limits set`):
//
//	free-search  {"method":"pkg.Svc/Search","tier":"free","limit":10,"window":"1s","algorithm":"log"}
//	vip          {"method":"*","tier":"vip","limit":1000,"window":"1s","algorithm":"gcra"}
//
// Clients read the hash with the service state they refresh every second
// (Client.refresh), so a change applies within a second, without restarts.
// A call is checked against every rule whose method and tier match it;
// when none does, the check costs nothing (it is decided from the cached
// rules). Otherwise one script (store.NewLimit) decides for all the matching
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

// limitRules is a service's rules as its client last read them.
type limitRules struct {
	raw   map[string]string // the hash as read, to skip parsing an unchanged one
	rules []wire.LimitRule  // the valid ones, by name
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
	rules, invalid := wire.ParseLimits(s.name, raw)
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
	if c.identity != nil {
		key = c.identity.name // the caller the servers will verify, not a header
	}
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
	call := store.NewLimit()
	var applied []wire.LimitRule
	for _, r := range rules.rules {
		if (r.Method != "*" && r.Method != full) || (r.Tier != "*" && r.Tier != tier) {
			continue
		}
		applied = append(applied, r)
		call.Add(c.keys.RateKey(svc.name, r.Name+":"+key), r.Algorithm, r.Limit, r.Window, r.Burst)
	}
	if len(applied) == 0 {
		return nil
	}
	store.Run(ctx, c.rdb, &call.Call)
	admitted, after, refusedBy, err := call.Result()
	if err != nil {
		if ctx.Err() != nil {
			return notSent(ctx, full, rid, "while checking its rate limit")
		}
		return notExecutedf(Unavailable, "%s [%s]: cannot check the rate limit in Redis: %v; the request was not sent", full, rid, err)
	}
	if admitted {
		return nil
	}
	rule := applied[refusedBy]
	// Round up to the millisecond: a caller waiting that long is admitted.
	after = (after + time.Millisecond - 1).Truncate(time.Millisecond)
	if !rules.tiers[tier] {
		tier = "other" // bounded attribute values: tiers named by some rule
	}
	service, method, _ := strings.Cut(full, "/")
	c.limiter.refused.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(
		semconv.RPCService(service), semconv.RPCMethod(method),
		attribute.String("rpr.limit.tier", tier), attribute.String("rpr.limit.rule", rule.Name))))
	e := notExecutedf(ResourceExhausted, "%s [%s]: refused by rate limit %q of %s (%d calls per %v per caller, %s); not sent, retry after %v",
		full, rid, rule.Name, svc.name, rule.Limit, rule.Window, rule.Algorithm, after)
	return withRefusal(e, ReasonRateLimited, after)
}
