package tunnel

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// RedisLogger carries go-redis's own log lines (a failed dial, a Sentinel
// switching masters, a Cluster node gone) to an slog.Logger as structured
// records, instead of go-redis's default unstructured lines on stderr.
// The same kind of line is logged at most once per RedisLogRepeat, with
// the number of lines left out, so that an outage of Redis is a few
// records, not one per dial attempt.
//
// go-redis keeps one logger per process, and dials on goroutines of its
// own, so its lines cannot be told apart by Client or Server: rpr never
// installs the logger itself, and a program installs it once, at start,
// usually with the logger it gives ClientOptions.Logger and
// ServerOptions.Logger:
//
//	redis.SetLogger(tunnel.NewRedisLogger(logger))
type RedisLogger struct {
	log  *slog.Logger
	mu   sync.Mutex
	seen map[string]*redisLogKind // by the line's format
}

// RedisLogRepeat is how often RedisLogger logs one kind of line at most.
const RedisLogRepeat = 10 * time.Second

// redisLogKind is what RedisLogger remembers of one kind of line.
type redisLogKind struct {
	last    time.Time
	dropped int
}

// redisLogKinds bounds how many kinds of lines a RedisLogger remembers:
// go-redis has a few dozen formats, so more means something is wrong and
// the memory is cleared rather than grown.
const redisLogKinds = 256

// NewRedisLogger returns a RedisLogger writing to log (slog.Default()
// when nil).
func NewRedisLogger(log *slog.Logger) *RedisLogger {
	if log == nil {
		log = slog.Default()
	}
	return &RedisLogger{log: log, seen: make(map[string]*redisLogKind)}
}

// Printf implements go-redis's logging interface: it logs one go-redis
// line, as a warning when it reports a failure.
func (l *RedisLogger) Printf(ctx context.Context, format string, args ...any) {
	dropped, ok := l.admit(format, time.Now())
	if !ok {
		return
	}
	msg := "redis: " + strings.TrimPrefix(fmt.Sprintf(format, args...), "redis: ")
	level := slog.LevelInfo
	if lower := strings.ToLower(msg); strings.Contains(lower, "fail") || strings.Contains(lower, "error") || strings.Contains(lower, "refused") {
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{slog.String("source", "go-redis")}
	if dropped > 0 {
		attrs = append(attrs, slog.Int("repeated", dropped))
	}
	l.log.LogAttrs(ctx, level, msg, attrs...)
}

// admit reports whether a line of format is logged now and how many of
// its kind were left out since the last one that was.
func (l *RedisLogger) admit(format string, now time.Time) (dropped int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.seen[format]
	if k == nil {
		if len(l.seen) >= redisLogKinds {
			clear(l.seen)
		}
		l.seen[format] = &redisLogKind{last: now}
		return 0, true
	}
	if now.Sub(k.last) < RedisLogRepeat {
		k.dropped++
		return 0, false
	}
	dropped, k.dropped, k.last = k.dropped, 0, now
	return dropped, true
}
