package tunnel

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Open connects to the Redis at rawURL and checks that it answers. It
// accepts redis://[user:password@]host:port[/db] and rediss:// (TLS), plus
// the query options go-redis understands (e.g. ?dial_timeout=3s). The result
// is a go-redis UniversalClient shared by a Client and a Server in one
// process; close it when both are closed.
//
// Blocking stream reads (one per Client per service, one per Server per
// service) hold a pooled connection while they wait; the default pool (ten
// connections per CPU) leaves ample room for command traffic. Raise
// ?pool_size= when one process serves or calls many services.
func Open(ctx context.Context, rawURL string) (redis.UniversalClient, error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("rpr: redis URL %q: %w (want redis://host:port/db or rediss://host:port/db)", redactURL(rawURL), err)
	}
	rdb := redis.NewClient(opts)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("rpr: connect to redis at %s: %w", redactURL(rawURL), err)
	}
	return rdb, nil
}

// redactURL hides a password in a Redis URL so it can appear in errors.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return strings.Replace(u.String(), "xxxxx", "****", 1)
}
