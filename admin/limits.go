package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rprtunnel/rpr/internal/wire"
)

// Limits reads and changes one service's rate-limit rules; it is what `rpr
// limits` uses. The rules live in the service's limits hash, one field per
// rule (the field is the rule's name). Clients read the hash with the
// service state they refresh every second, so a change applies within a
// second, without restarts. A call is checked against every rule whose
// method and tier match it, on Redis's clock, before it is sent; the
// caller's key and tier come from tunnel.ClientOptions.LimitKey (by
// default the x-rpr-caller and x-rpr-tier headers).
type Limits struct {
	svc *Service
}

// Rate-limit algorithms (LimitRule.Algorithm).
const (
	// LimitLog is the exact sliding log: no window of the rule's length,
	// wherever it starts, holds more than Limit admitted calls. Its memory
	// grows with Limit (one sorted-set entry per admitted call still in
	// the window, per caller), so Limit is capped at MaxLogLimit.
	LimitLog = "log"
	// LimitGCRA is the generic cell rate algorithm: constant memory per
	// caller, calls spaced Window/Limit apart, and Burst (default Limit)
	// let through at once after a quiet spell. A window of the rule's
	// length may then hold up to Limit+Burst-1 calls; Burst 1 makes it
	// exact in every window, with no bursts.
	LimitGCRA = "gcra"
)

// MaxLogLimit caps Limit for the sliding log, whose memory grows with it;
// use LimitGCRA for higher limits.
const MaxLogLimit = 100_000

// LimitRule is one rate limit of a service: at most Limit calls per
// Window by each caller of the given tier to the given method.
type LimitRule struct {
	// Name names the rule: 1-64 letters, digits, '.', '_' or '-'.
	Name string
	// Method is the full method name the rule applies to ("pkg.Svc/Search";
	// Limits.Set also accepts the short "Search"), or "*" for all the
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

// wireRule is r in the protocol's form.
func (r LimitRule) wireRule() wire.LimitRule { return wire.LimitRule(r) }

// limitRuleOf is the protocol's rule r in this package's form.
func limitRuleOf(r wire.LimitRule) LimitRule { return LimitRule(r) }

// String describes the rule in one line.
func (r LimitRule) String() string { return r.wireRule().String() }

// Normalize checks r as a rule of service and returns it with its defaults
// filled in: the full method name for a short one, tier "*" when empty,
// the log algorithm when none is named, and GCRA's burst. Its errors are
// *LimitRuleError.
func (r LimitRule) Normalize(service string) (LimitRule, error) {
	n, err := r.wireRule().Normalize(service)
	if err != nil {
		return LimitRule{}, limitError(err)
	}
	return limitRuleOf(n), nil
}

// LimitRuleError says which field of a LimitRule is wrong and what a good
// value looks like.
type LimitRuleError struct {
	// Field is "name", "method", "tier", "limit", "window", "algorithm" or
	// "burst".
	Field string
	// Value is the field's value, as text; Problem says what is wrong with
	// it and Example shows a good one.
	Value   string
	Problem string
	Example string
}

func (e *LimitRuleError) Error() string {
	return fmt.Sprintf("%s %q %s, e.g. %s", e.Field, e.Value, e.Problem, e.Example)
}

// limitError turns the protocol's rule error into a *LimitRuleError;
// other errors pass unchanged.
func limitError(err error) error {
	var we *wire.LimitRuleError
	if !errors.As(err, &we) {
		return err
	}
	return &LimitRuleError{Field: we.Field, Value: we.Value, Problem: we.Problem, Example: we.Example}
}

// InvalidLimit is a field of a limits hash that is not a valid rule;
// clients ignore it (and log a warning when they read it).
type InvalidLimit struct {
	// Name is the field; Raw its value.
	Name string
	Raw  string
	// Err says what is wrong (a *LimitRuleError when one field is).
	Err error
}

// ParseLimitRule reads a rule of service as stored in its limits hash:
// name is the field, raw the value, the rule's JSON form
//
//	{"method": "pkg.Svc/Method" | "*", "tier": "vip" | "*", "limit": 100,
//	 "window": "1s", "algorithm": "log" | "gcra", "burst": 100}
//
// It checks the rule and fills in its defaults, as Normalize does.
func ParseLimitRule(service, name, raw string) (LimitRule, error) {
	r, err := wire.ParseLimitRule(service, name, raw)
	if err != nil {
		return LimitRule{}, limitError(err)
	}
	return limitRuleOf(r), nil
}

// Key returns the name of the limits hash, for messages and redis-cli.
func (l *Limits) Key() string { return l.svc.keys.Limits(l.svc.name) }

// List reads the service's rules, sorted by name, and the fields of its
// limits hash that are not valid rules (one HGETALL).
func (l *Limits) List(ctx context.Context) ([]LimitRule, []InvalidLimit, error) {
	raw, err := l.svc.rdb.HGetAll(ctx, l.Key()).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("rpr: read the rate limits of %s: %w", l.svc.name, err)
	}
	rules, invalid := wire.ParseLimits(l.svc.name, raw)
	out := make([]LimitRule, len(rules))
	for i, r := range rules {
		out[i] = limitRuleOf(r)
	}
	var bad []InvalidLimit
	for _, b := range invalid {
		bad = append(bad, InvalidLimit{Name: b.Name, Raw: b.Raw, Err: limitError(b.Err)})
	}
	return out, bad, nil
}

// Set stores rule (checked and normalized, see Normalize) as a rate limit
// of the service, replacing any rule of that name (one HSET). Clients
// apply it within a second. It returns the rule as stored; a bad rule is
// a *LimitRuleError, and nothing is stored.
func (l *Limits) Set(ctx context.Context, rule LimitRule) (LimitRule, error) {
	w, err := rule.wireRule().Normalize(l.svc.name)
	if err != nil {
		return LimitRule{}, limitError(err)
	}
	raw, err := json.Marshal(w)
	if err != nil {
		return LimitRule{}, fmt.Errorf("rpr: encode rate limit %s of %s: %w", w.Name, l.svc.name, err)
	}
	if err := l.svc.rdb.HSet(ctx, l.Key(), w.Name, raw).Err(); err != nil {
		return LimitRule{}, fmt.Errorf("rpr: store rate limit %s of %s: %w", w.Name, l.svc.name, err)
	}
	return limitRuleOf(w), nil
}

// Remove deletes the service's rule name (one HDEL); false when there was
// none. Clients stop applying it within a second; its counters expire
// within a window.
func (l *Limits) Remove(ctx context.Context, name string) (bool, error) {
	n, err := l.svc.rdb.HDel(ctx, l.Key(), name).Result()
	if err != nil {
		return false, fmt.Errorf("rpr: remove rate limit %s of %s: %w", name, l.svc.name, err)
	}
	return n > 0, nil
}
