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
// Blocking stream reads (one per Client per service it calls, one per
// Server per service it serves) hold a pooled connection while they wait;
// the default pool (ten connections per CPU) leaves room for command
// traffic. rpr checks this: Serve refuses to start, and a Client refuses a
// new service, when the blocking reads would leave fewer than four
// connections for commands; raise ?pool_size= then.
func Open(ctx context.Context, rawURL string) (redis.UniversalClient, error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("rpr: redis URL %q: %w (want redis://host:port/db or rediss://host:port/db)", RedactURL(rawURL), err)
	}
	rdb := redis.NewClient(opts)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("rpr: connect to redis at %s: %w", RedactURL(rawURL), err)
	}
	return rdb, nil
}

// RedactURL hides the password of a Redis URL ("redis://user:****@host"),
// so that the URL can appear in errors, logs and on screens.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return strings.Replace(u.String(), "xxxxx", "****", 1)
}

// poolSize returns the connection pool size of rdb, or 0 when it cannot
// be told (a UniversalClient of another kind).
func poolSize(rdb redis.UniversalClient) int {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().PoolSize
	case *redis.ClusterClient:
		return c.Options().PoolSize
	}
	return 0
}

// checkPool refuses a pool too small for the blocking reads a process
// holds open: each takes a pooled connection for as long as it waits, and
// commands need connections too. needed is the number of blocking reads.
func checkPool(rdb redis.UniversalClient, needed int, who string) error {
	size := poolSize(rdb)
	if size == 0 || needed+minFreeConns <= size {
		return nil
	}
	return fmt.Errorf("rpr: %s keeps %d blocking reads open but the Redis pool has only %d connections; set pool_size=%d or more (redis URL ?pool_size=, or redis.Options.PoolSize)", who, needed, size, needed+minFreeConns)
}

// minFreeConns is the number of pooled connections kept for commands
// beyond the blocking reads.
const minFreeConns = 4
