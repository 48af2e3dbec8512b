package wire

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestWorkerLiveAt: a worker is live for LiveWindow after its last beat,
// and a record with a beat far in the past (-2^63, which overflowed the
// difference the check used to take) is not.
func TestWorkerLiveAt(t *testing.T) {
	const now = 1795995318695
	for beat, live := range map[int64]bool{
		now: true, now - LiveWindow.Milliseconds(): true, now + 1000: true,
		now - LiveWindow.Milliseconds() - 1: false, 0: false, math.MinInt64: false,
	} {
		if got := (Worker{BeatMs: beat}).LiveAt(now); got != live {
			t.Errorf("beat %d: LiveAt(%d) = %v, want %v", beat, int64(now), got, live)
		}
	}
	if got := LiveByLane(map[string]string{"w1": `{"beat_ms":-9223372036854775808}`}, now, "default"); len(got) != 0 {
		t.Errorf("a record beating at -2^63 counts as live: %v", got)
	}
}

// TestReadRoster: a roster counts live workers by lane and, of every
// record that parses, keeps the latest beat and its worker, so that a
// caller told nobody is live can say for how long.
func TestReadRoster(t *testing.T) {
	const now = 1795995318695
	r := ReadRoster(map[string]string{
		"old":    `{"beat_ms":1795995258695}`,                 // 60s ago
		"recent": `{"beat_ms":1795995306695,"lane":"v2"}`,     // 12s ago
		"live":   `{"beat_ms":1795995317695,"lane":"canary"}`, // 1s ago
		"broken": `not json`,
	}, now, "default")
	if r.Known != 3 || r.LatestWorker != "live" || r.Live["canary"] != 1 || len(r.Live) != 1 || r.Silence() != time.Second {
		t.Fatalf("roster %+v (silence %v); want 3 known, live the latest, one live in canary, silent 1s", r, r.Silence())
	}
	r = ReadRoster(map[string]string{"recent": `{"beat_ms":1795995306695}`}, now, "default")
	if r.Known != 1 || len(r.Live) != 0 || r.Silence() != 12*time.Second || r.LatestWorker != "recent" {
		t.Fatalf("roster %+v (silence %v); want one known, none live, silent 12s", r, r.Silence())
	}
	if r := ReadRoster(nil, now, "default"); r.Known != 0 || r.Silence() != 0 || len(r.Live) != 0 {
		t.Fatalf("empty hash: roster %+v", r)
	}
}

// TestRouteRuleWeights: a lane's weight is 0 to MaxLaneWeight, so that
// the weights of a rule never overflow their sum, which sent every call
// to the first lane, weight 0 or not.
func TestRouteRuleWeights(t *testing.T) {
	ok := RouteRule{Lanes: []LaneWeight{{Lane: "v1", Weight: 0}, {Lane: "v2", Weight: MaxLaneWeight}}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("weights 0 and %d: %v", MaxLaneWeight, err)
	}
	if lane := ok.Pick(0); lane != "v2" {
		t.Errorf("Pick(0) = %q, want v2 (v1 has weight 0)", lane)
	}
	for _, w := range []int{-1, MaxLaneWeight + 1, math.MaxInt} {
		r := RouteRule{Lanes: []LaneWeight{{Lane: "a", Weight: 0}, {Lane: "b", Weight: w}, {Lane: "c", Weight: 1}}}
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), `lane "b" has weight`) {
			t.Errorf("weight %d: Validate = %v, want it refused, naming the lane", w, err)
		}
	}
	if _, err := ParseRouteRule("v1:90,v2:2000000"); err == nil || !strings.Contains(err.Error(), "want 0 to 1000000") {
		t.Errorf("ParseRouteRule of weight 2000000: %v, want it refused with the bound", err)
	}
}

// TestRouteRuleStringReadsBack checks that a rule String writes is read
// back as the same rule, header values that start with '>' or hold "=>"
// included (written next to its '=', such a value holds an arrow before
// the rule's own).
func TestRouteRuleStringReadsBack(t *testing.T) {
	for _, spec := range []string{"x-version= >2 => v2", "a= >,b= >=1 => v1:1,v2:3", "x-canary=true => v2", "v1:90,v2:10",
		"x-version=>2 => v2", "x=a=>b => v1:1,v2:1"} {
		r, err := ParseRouteRule(spec)
		if err != nil {
			t.Fatalf("ParseRouteRule(%q): %v", spec, err)
		}
		again, err := ParseRouteRule(r.String())
		if err != nil {
			t.Fatalf("%q is written %q, which does not read: %v", spec, r.String(), err)
		}
		if !maps.Equal(r.Match, again.Match) || !slices.Equal(r.Lanes, again.Lanes) {
			t.Errorf("%q is written %q, which reads as %+v, not %+v", spec, r.String(), again, r)
		}
	}
}

// TestRouteRuleStringQuotesValues: a header value the text form could not
// hold as it is (a ',' or '"', spaces at its ends, a character that does
// not print, as a rule set through the API or a routes hash may have) is
// written quoted and read back the same; bad quoting and a header given
// twice are refused by name. So is a key such a rule may have.
func TestRouteRuleStringQuotesValues(t *testing.T) {
	lanes := []LaneWeight{{Lane: "v2", Weight: 1}}
	written := map[string]string{
		"a,b":       `tenant="a,b" => v2`,
		` padded `:  `tenant=" padded " => v2`,
		`say "hi"`:  `tenant="say \"hi\"" => v2`,
		"tab\there": `tenant="tab\there" => v2`,
		"":          `tenant= => v2`,
		"x=>2":      `tenant=x=>2 => v2`,
		"übung":     `tenant=übung => v2`,
	}
	for value, want := range written {
		r := RouteRule{Match: map[string]string{"tenant": value}, Lanes: lanes}
		if got := r.String(); got != want {
			t.Errorf("value %q is written %s; want %s", value, got, want)
		}
		again, err := ParseRouteRule(r.String())
		if err != nil || again.Match["tenant"] != value {
			t.Errorf("%s reads as %+v (%v); want the value %q", r.String(), again.Match, err, value)
		}
	}
	both := `tenant = "a,b" , region=eu-1 => v2`
	if r, err := ParseRouteRule(both); err != nil || r.Match["tenant"] != "a,b" || r.Match["region"] != "eu-1" {
		t.Errorf("ParseRouteRule(%s) = %+v, %v; want tenant a,b and region eu-1", both, r.Match, err)
	}
	refused := map[string]string{
		`tenant="a,b => v2`: `header "tenant": the quoted value "a,b is not a complete quoted string`,
		`tenant="a"b => v2`: `"b" follows the quoted value "a"`,
		`"ten"ant=1 => v2`:  `"ant=1" follows the quoted key "ten"`,
		`a=1,b=2,a=3 => v2`: `header "a" has two conditions`,
		`tenant,x=1 => v2`:  `"tenant" is not key=value`,
		`tenant=a, => v2`:   `"" is not key=value`,
	}
	for spec, want := range refused {
		if _, err := ParseRouteRule(spec); err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "route rule ") {
			t.Errorf("ParseRouteRule(%s) = %v; want an error naming the rule and saying %s", spec, err, want)
		}
	}
	keys := map[string]string{"a=b": `"a=b"=1 => v2`, "a,b": `"a,b"=1 => v2`, "a b": `a b=1 => v2`, `a"b`: `"a\"b"=1 => v2`}
	for key, want := range keys {
		r := RouteRule{Match: map[string]string{key: "1"}, Lanes: lanes}
		again, err := ParseRouteRule(r.String())
		if r.String() != want || err != nil || again.Match[key] != "1" {
			t.Errorf("key %q is written %s (want %s), which reads as %+v (%v)", key, r.String(), want, again.Match, err)
		}
	}
}
