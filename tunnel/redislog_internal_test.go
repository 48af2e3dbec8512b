package tunnel

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRedisLoggerCollapses checks that a go-redis failure is a structured
// warning, other lines are information, and that the same kind of line
// is logged once per RedisLogRepeat with the count of those left out.
func TestRedisLoggerCollapses(t *testing.T) {
	var out bytes.Buffer
	l := NewRedisLogger(slog.New(slog.NewTextHandler(&out, nil)))
	ctx := context.Background()
	const dial = "redis: connection pool: failed to dial after %d attempts: %v"
	for range 50 {
		l.Printf(ctx, dial, 5, "dial tcp 127.0.0.1:1: connect: connection refused")
	}
	l.Printf(ctx, "sentinel: new master=%q addr=%q", "rpr", "127.0.0.1:2")

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("50 dial failures and a new master made %d records, want 2:\n%s", len(lines), out.String())
	}
	if l := lines[0]; !strings.Contains(l, "level=WARN") || !strings.Contains(l, `msg="redis: connection pool: failed to dial after 5 attempts`) || !strings.Contains(l, "source=go-redis") {
		t.Errorf("dial failure record = %q, want a WARN with go-redis's message, prefixed once, and source=go-redis", l)
	}
	if l := lines[1]; !strings.Contains(l, "level=INFO") || !strings.Contains(l, `msg="redis: sentinel: new master`) {
		t.Errorf("new master record = %q, want an INFO", l)
	}
	if dropped, ok := l.admit(dial, time.Now().Add(RedisLogRepeat)); !ok || dropped != 49 {
		t.Errorf("after RedisLogRepeat: admit = %d, %v; want 49 left out, logged", dropped, ok)
	}
}
