package tunnel_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestDeadLettersHeldAtTheCap fills a service's dead-letter stream to its
// cap (ServerOptions.MaxDeadLetters): the next request that exhausts its
// attempts is neither dropped nor dead-lettered, no letter is trimmed,
// and it does not run again while it is held (it comes back, is found
// held and is held again); an unreadable entry stays pending. Once an
// operator drops the letters there, both are dead-lettered, the request
// with its own reason and attempts, and a replay of it runs it again.
func TestDeadLettersHeldAtTheCap(t *testing.T) {
	w := newAsyncWorld(t, tunnel.ClientOptions{})
	ctx := context.Background()
	var fixed atomic.Bool
	w.jobs.setFunc(func(ctx context.Context, in *wrapperspb.StringValue) error {
		if fixed.Load() {
			return nil
		}
		return tunnel.Errorf(tunnel.Unavailable, "downstream is down")
	})
	const maxLetters = 2
	srv, _ := startServer(t, w.redis.Client(t), tunnel.ServerOptions{MaxDeadLetters: maxLetters, Lease: time.Second,
		RetryPollInterval: 20 * time.Millisecond, Logger: w.logger()},
		func(s *tunnel.Server) { s.RegisterService(&jobsDesc, w.jobs) })
	for i := range maxLetters {
		if _, err := w.enqueue("Do", fmt.Sprint("first-", i)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the dead-letter stream to reach its cap", func() bool { return len(w.deadLetters()) == maxLetters })

	held, err := w.enqueue("Do", "held", tunnel.WithIdempotencyKey("order-held"))
	if err != nil {
		t.Fatal(err)
	}
	garbage, err := w.rdb.XAdd(ctx, &redis.XAddArgs{Stream: "rpr:v1:{" + jobsService + "}:req", Values: []any{wire.Field, "not an envelope"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Held at least twice: once when its last attempt failed, again when
	// it came back from the retry set to a stream still full.
	waitLong(t, 30*time.Second, "the request's dead letter to be held, and held again", func() bool {
		return srv.Stats().DeadLettersHeld >= 3 && w.jobs.count("held") == fastRetry.MaxAttempts
	}, func() string {
		return fmt.Sprintf("held %d times, ran %d times; log:\n%s", srv.Stats().DeadLettersHeld, w.jobs.count("held"), tail(w.logs.String(), 5))
	})
	// Another request with its key, while it is held, is not run (the key
	// failed an attempt) and does not release the held one.
	if _, err := w.enqueue("Do", "duplicate", tunnel.WithIdempotencyKey("order-held")); err != nil {
		t.Fatal(err)
	}
	waitLong(t, 10*time.Second, "the duplicate to be retired", func() bool { return strings.Contains(w.logs.String(), "already handled under its idempotency key") }, func() string { return tail(w.logs.String(), 8) })
	state := "rpr:v1:{" + jobsService + "}:st:" + held.IdempotencyKey
	if letter, err := w.rdb.HGet(ctx, state, wire.StateHeld).Result(); err != nil || letter == "" {
		t.Errorf("state of the held request: %q, %v; want its letter in field %s", letter, err, wire.StateHeld)
	}
	if n := len(w.deadLetters()); n != maxLetters {
		t.Errorf("%d dead letters while full, want the %d there (none trimmed, none added)", n, maxLetters)
	}
	pending, err := w.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "rpr:v1:{" + jobsService + "}:req", Group: "workers", Start: garbage, End: garbage, Count: 1}).Result()
	if err != nil || len(pending) != 1 {
		t.Errorf("the unreadable entry while full: pending %v, %v; want it left pending", pending, err)
	}
	if !strings.Contains(w.logs.String(), "dead-letter stream is full") {
		t.Errorf("no log line says the dead-letter stream is full:\n%s", tail(w.logs.String(), 10))
	}
	stats, err := admin.New(w.rdb, admin.Options{}).Service(jobsService).Stats(ctx)
	if err != nil || !stats.DeadLettersFull || stats.DeadLetterCap != maxLetters {
		t.Errorf("admin stats while full: %+v, %v; want DeadLettersFull and DeadLetterCap %d", stats, err, maxLetters)
	}

	// The operator looks at the letters and drops them.
	dlq := admin.New(w.rdb, admin.Options{}).Service(jobsService).DeadLetters()
	letters, err := dlq.List(ctx, admin.DeadLetterFilter{}, 0)
	if err != nil || len(letters) != maxLetters {
		t.Fatalf("List: %d, %v", len(letters), err)
	}
	ids := make([]string, len(letters))
	for i, l := range letters {
		ids[i] = l.EntryID
	}
	if n, err := dlq.Drop(ctx, ids, nil); err != nil || n != maxLetters {
		t.Fatalf("Drop: %d, %v", n, err)
	}
	waitLong(t, 30*time.Second, "the held request and the unreadable entry to be dead-lettered", func() bool {
		return len(w.deadLetters()) == 2
	}, func() string {
		return fmt.Sprintf("%d dead letters; log:\n%s", len(w.deadLetters()), tail(w.logs.String(), 5))
	})
	got, err := dlq.Get(ctx, held.RequestID)
	if err != nil || got.Reason != fmt.Sprintf("attempts exhausted (%d of %d)", fastRetry.MaxAttempts, fastRetry.MaxAttempts) ||
		got.Attempts != fastRetry.MaxAttempts || got.Code != tunnel.Unavailable {
		t.Errorf("the held request's letter: %+v, %v; want its own reason, attempts and code", got, err)
	}
	if n := w.jobs.count("held"); n != fastRetry.MaxAttempts {
		t.Errorf("the held request ran %d times, want %d (its attempts, none while held)", n, fastRetry.MaxAttempts)
	}
	if n := w.jobs.count("duplicate"); n != 0 {
		t.Errorf("the duplicate of the held request ran %d times", n)
	}
	if s, r := w.queued(); s != 0 || r != 0 {
		t.Errorf("after dead-lettering: %d in the stream, %d in the retry set; want none", s, r)
	}
	if n, err := w.rdb.HExists(ctx, state, wire.StateHeld).Result(); err != nil || n {
		t.Errorf("the dead-lettered request's state still holds a held letter (%v, %v)", n, err)
	}

	// A replay after the fix runs it once more.
	fixed.Store(true)
	if res, err := dlq.Replay(ctx, []admin.DeadLetter{got}, nil); err != nil || res.Replayed != 1 {
		t.Fatalf("Replay: %+v, %v", res, err)
	}
	waitFor(t, "the replayed request to run", func() bool { return w.jobs.count("held") == fastRetry.MaxAttempts+1 })
}
