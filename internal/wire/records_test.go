package wire

import (
	"math"
	"strings"
	"testing"
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
