package tunnel_test

import (
	"context"
	"testing"

	"github.com/rprtunnel/rpr/tunnel"
)

// TestScriptsSurviveScriptFlush flushes Redis's script cache, as a restart
// or a failover to a replica does, between calls: the scripts sent from
// pipelines (enqueue, complete) fall back on EVAL after NOSCRIPT, the others
// are reloaded by go-redis, and no call fails because of it.
func TestScriptsSurviveScriptFlush(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	for i := range 3 {
		if err := e.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := e.call(ctx, "Echo", "after flush"); err != nil || got != "echo: after flush" {
			t.Fatalf("unary call %d after SCRIPT FLUSH: %q, %v", i, got, err)
		}
	}
	if n := e.count("Echo(after flush)"); n != 3 {
		t.Errorf("the 3 unary calls ran %d times, want once each", n)
	}

	w := newAsyncWorld(t, tunnel.ClientOptions{})
	w.serve(tunnel.ServerOptions{})
	for i := range 3 {
		if err := w.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := w.enqueue("Do", string(rune('a'+i))); err != nil {
			t.Fatalf("enqueue %d after SCRIPT FLUSH: %v", i, err)
		}
	}
	waitFor(t, "the three async requests to run", func() bool { return w.jobs.distinct() == 3 })
	waitFor(t, "the queue to empty", func() bool { s, r := w.queued(); return s == 0 && r == 0 })
	for i := range 3 {
		if v := string(rune('a' + i)); w.jobs.count(v) != 1 {
			t.Errorf("async request %s ran %d times, want 1", v, w.jobs.count(v))
		}
	}
	if dl := w.deadLetters(); len(dl) != 0 {
		t.Errorf("%d dead letters, want none", len(dl))
	}
}
