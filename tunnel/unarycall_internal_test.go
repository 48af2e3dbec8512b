package tunnel

import "testing"

// TestUnaryCallReusedOnlyWhenBothLetGo: a unary call goes back to its
// pool (emptied) only once its caller and the flusher of its first send
// have both let go, and only when its answer was delivered; one whose
// caller gave up is left as it is, for the collector, since a late
// answer may still be delivered to it.
func TestUnaryCallReusedOnlyWhenBothLetGo(t *testing.T) {
	var pool objectPool[unaryCall]
	start := func(delivered bool) *unaryCall {
		u := &unaryCall{pool: &pool}
		u.call.id = "20261207-TEST-1796659200000-ABCDEF"
		u.call.delivered = delivered
		u.holders.Store(2) // the caller and the flusher
		return u
	}
	emptied := func(u *unaryCall) bool { return u.call.id == "" }

	u := start(true)
	u.letGo()
	if emptied(u) {
		t.Fatal("the call was given back while its other holder could still read it")
	}
	u.letGo()
	if !emptied(u) {
		t.Fatal("the call was not given back once both holders let go")
	}

	u = start(false)
	u.letGo()
	u.letGo()
	if emptied(u) {
		t.Fatal("a call whose answer was not delivered was given back to the pool")
	}
}
