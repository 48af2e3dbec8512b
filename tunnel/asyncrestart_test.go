package tunnel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

// TestDelayedSurviveServerRestart: delayed requests wait in Redis, not in
// a server: enqueued while a server runs or while none does, they run once
// a server runs again, each exactly once and none before it is due.
func TestDelayedSurviveServerRestart(t *testing.T) {
	w := newBufferWorld(t)
	client := w.newClient(tunnel.ClientOptions{})
	stop := w.serve(tunnel.ServerOptions{})

	due := map[string]time.Time{}
	enqueue := func(v string, opt tunnel.CallOption) {
		t.Helper()
		r, err := client.Enqueue(context.Background(), absorbMethod, wrapperspb.String(v), opt)
		if err != nil {
			t.Fatalf("enqueue %s: %v", v, err)
		}
		due[v] = r.ProcessAt
	}
	// Enqueued while the first server runs; due after it is gone.
	for i := range 20 {
		enqueue(fmt.Sprintf("before-stop-%02d", i), tunnel.WithDelay(2*time.Second+time.Duration(i)*100*time.Millisecond))
	}
	// Stopping ends the server's mover at once; a request due before that
	// (only on a machine so loaded that 20 enqueues took 2s) may run on
	// the first server, and is judged by "not before due" only.
	stopping := time.Now()
	stop()
	stoppedAt := time.Now()
	// Enqueued while no server runs: some due before the next one starts,
	// some after.
	for i := range 20 {
		enqueue(fmt.Sprintf("while-down-%02d", i), tunnel.WithDelay(time.Duration(i+1)*200*time.Millisecond))
	}
	restartAt := stoppedAt.Add(3 * time.Second)
	enqueue("at-restart", tunnel.WithProcessAt(restartAt.Add(time.Second)))
	dueLater := 0 // requests due after the first server stopped
	for _, when := range due {
		if when.After(stopping) {
			dueLater++
		}
	}
	if l := w.ledger(); l.retry < int64(dueLater) {
		t.Errorf("with no server: %d requests in the retry set, want all %d not yet due when the server stopped (%v)", l.retry, dueLater, l)
	}
	time.Sleep(time.Until(restartAt))
	startedAt := time.Now()
	w.serve(tunnel.ServerOptions{})

	waitLong(t, 30*time.Second, "every delayed request to run", func() bool { return w.jobs.distinct() == len(due) },
		func() string { return fmt.Sprintf("%d of %d ran; %v", w.jobs.distinct(), len(due), w.ledger()) })
	waitLong(t, 10*time.Second, "the queue to empty", func() bool { l := w.ledger(); return l.stream == 0 && l.retry == 0 },
		func() string { return w.ledger().String() })
	values := map[string]bool{}
	for v := range due {
		values[v] = true
	}
	w.checkRanOnce(values)
	w.checkLedger("after the restart", int64(len(due)))
	overdue := 0
	w.jobs.mu.Lock()
	defer w.jobs.mu.Unlock()
	for v, when := range due {
		ran := w.jobs.at[v]
		// As in TestAsyncDelayedRunsNoEarlier: the clock offset to Redis is
		// measured, so a small allowance covers its error only.
		if ran.Before(when.Add(-10 * time.Millisecond)) {
			t.Errorf("%s ran at %v, before it was due at %v", v, ran.Format(time.StampMilli), when.Format(time.StampMilli))
		}
		if when.After(stopping) && ran.Before(startedAt) {
			t.Errorf("%s ran at %v, with no server running (due %v, the second server started at %v)", v, ran.Format(time.StampMilli), when.Format(time.StampMilli), startedAt.Format(time.StampMilli))
		}
		if when.Before(startedAt) {
			overdue++
		}
	}
	t.Logf("%d delayed requests survived the server restart: %d were due while no server ran, %d came due after it restarted; all ran once, none early",
		len(due), overdue, len(due)-overdue)
}

// TestAsyncLongHandlerWithIdempotencyKeyKeepsLease: an async request with
// its own idempotency key, whose handler runs for several lease-renewal
// periods on a healthy server, keeps its lease: it runs once, is not
// cancelled, not retried and not dead-lettered. (The state hash of such a
// request is named by its key, not its request id; the lease renewal must
// renew that one.)
func TestAsyncLongHandlerWithIdempotencyKeyKeepsLease(t *testing.T) {
	const lease = 300 * time.Millisecond // renewed every 100ms
	w := newBufferWorld(t)
	cancelled := make(chan string, 16)
	w.jobs.setFunc(func(ctx context.Context, in *wrapperspb.StringValue) error {
		select {
		case <-time.After(4 * lease):
			return nil
		case <-ctx.Done():
			cancelled <- fmt.Sprintf("%s attempt %d: %v", in.GetValue(), tunnel.AttemptFromContext(ctx), context.Cause(ctx))
			return tunnel.NewError(tunnel.CodeOf(ctx.Err()), ctx.Err())
		}
	})
	client := w.newClient(tunnel.ClientOptions{})
	w.serve(tunnel.ServerOptions{Lease: lease})
	values := map[string]bool{"own-key": true, "default-key": true}
	if _, err := client.Enqueue(context.Background(), absorbMethod, wrapperspb.String("own-key"), tunnel.WithIdempotencyKey("order-7")); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(context.Background(), absorbMethod, wrapperspb.String("default-key")); err != nil {
		t.Fatal(err)
	}
	waitLong(t, 30*time.Second, "both requests to finish", func() bool { l := w.ledger(); return l.stream == 0 && l.retry == 0 },
		func() string { return w.ledger().String() })
	close(cancelled)
	for c := range cancelled {
		t.Errorf("handler cancelled on a healthy server: %s", c)
	}
	if lost := w.logs.Lines("lost the lease"); len(lost) > 0 {
		t.Errorf("the only server logged %d lost leases, e.g. %s", len(lost), lost[0])
	}
	if l := w.checkLedger("at the end", 2); l.processed != 2 || l.dead != 0 {
		t.Errorf("at the end: %v; want both processed, none dead-lettered", l)
	}
	w.checkRanOnce(values)
}
