package tunnel

import (
	"testing"
	"time"
)

// TestClockKeepsTheBestSample: a TIME reply that waited behind slow
// commands (a long, lopsided round trip) does not move the offset a quick
// one measured; a sample newer than clockWindow does, so drift is
// followed.
func TestClockKeepsTheBestSample(t *testing.T) {
	var c redisClock
	t0 := time.Unix(1_800_000_000, 0)
	const skew = 2 * time.Second // Redis's clock ahead of ours
	// A quick round trip: 1 ms, symmetric.
	c.observe(t0.Add(skew+500*time.Microsecond), t0, t0.Add(time.Millisecond))
	if got := time.Duration(c.offset.Load()); got != skew {
		t.Fatalf("offset = %v, want %v", got, skew)
	}
	// Under load: the reply reflects Redis's time 5 ms after sending but
	// reaches us 120 ms after: the midpoint guess is 55 ms off.
	for i := range 10 {
		sent := t0.Add(time.Duration(i+1) * time.Second)
		c.observe(sent.Add(skew+5*time.Millisecond), sent, sent.Add(120*time.Millisecond))
	}
	if got := time.Duration(c.offset.Load()); got != skew {
		t.Errorf("after slow samples the offset is %v, want the quick sample's %v", got, skew)
	}
	// Our clock is stepped back a second: a slow sample that cannot agree
	// with the best one is taken at once.
	sent := t0.Add(20 * time.Second)
	c.observe(sent.Add(skew+time.Second+5*time.Millisecond), sent, sent.Add(120*time.Millisecond))
	if got, want := time.Duration(c.offset.Load()), skew+time.Second-55*time.Millisecond; got != want {
		t.Errorf("after a clock step the offset is %v, want %v", got, want)
	}
	c = redisClock{}
	c.observe(t0.Add(skew+500*time.Microsecond), t0, t0.Add(time.Millisecond))
	// Our clock drifted 10 ms; past the window, a newer sample counts.
	sent = t0.Add(clockWindow + 2*time.Second)
	c.observe(sent.Add(skew+10*time.Millisecond+time.Millisecond), sent, sent.Add(2*time.Millisecond))
	if got, want := time.Duration(c.offset.Load()), skew+10*time.Millisecond; got != want {
		t.Errorf("after the window the offset is %v, want %v", got, want)
	}
}
