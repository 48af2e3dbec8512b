package tunnel

import (
	"testing"
	"time"
)

// TestTermLogBefore checks which term a log says held at a time: the
// last one a probe answered before it, and none before the first probe
// or past what the log keeps; a probe that answers after a later one
// changes nothing.
func TestTermLogBefore(t *testing.T) {
	t0 := time.Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var l termLog
	l.observe("a", at(1))
	l.observe("a", at(2))
	l.observe("b", at(5))
	l.observe("c", at(4)) // answered after b's probe: dropped
	for _, tc := range []struct {
		sec  int
		want string
	}{{0, ""}, {1, ""}, {2, "a"}, {4, "a"}, {6, "b"}} {
		if got := l.before(at(tc.sec)); got != tc.want {
			t.Errorf("before(+%ds) = %q, want %q", tc.sec, got, tc.want)
		}
	}
	for i, term := range []string{"c", "d", "e", "f"} {
		l.observe(term, at(10+i))
	}
	if got := l.before(at(6)); got != "" {
		t.Errorf("before(+6s) = %q after four more changes, want none: the log keeps %d", got, termHistory)
	}
	if got := l.before(at(20)); got != "f" {
		t.Errorf("before(+20s) = %q, want f", got)
	}
}
