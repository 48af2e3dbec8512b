package admin

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
)

// Options configure a Client.
type Options struct {
	// Prefix starts every key of the deployment to administer, as in
	// tunnel.ClientOptions.Prefix and tunnel.ServerOptions.Prefix; "" is
	// tunnel.DefaultPrefix.
	Prefix string
}

// Client is the operator handle of one rpr deployment: the Redis it uses
// and its key prefix. It holds no state of its own beyond those two, so it
// is cheap to create (one per command run, as the CLI does) and safe for
// concurrent use. Closing rdb is the caller's business.
type Client struct {
	rdb  redis.UniversalClient
	keys store.Keyspace
}

// New returns the handle of the deployment under opts.Prefix in rdb.
func New(rdb redis.UniversalClient, opts Options) *Client {
	return &Client{rdb: rdb, keys: store.NewKeyspace(opts.Prefix)}
}

// Prefix returns the key prefix the handle works under (never "").
func (c *Client) Prefix() string { return c.keys.Prefix() }

// Service returns the handle of one service, by its full name
// ("pkg.v1.Service"). It does no I/O and checks nothing: a service Redis
// knows nothing of reads as empty.
func (c *Client) Service(name string) *Service {
	return &Service{rdb: c.rdb, keys: c.keys, name: name}
}

// Services returns, sorted, the names of the services that have a
// published schema or worker heartbeats. It SCANs the keyspace (never
// KEYS), on every master of a Redis Cluster: a cost proportional to the
// number of keys, for operators' tools. Wildcards in the prefix are taken
// literally.
func (c *Client) Services(ctx context.Context) ([]string, error) {
	found := map[string]bool{}
	err := store.ScanEveryMaster(ctx, c.rdb, c.keys.ServicePatterns(), func(key string) {
		if name, ok := c.keys.ServiceOf(key); ok {
			found[name] = true
		}
	})
	if err != nil {
		return nil, fmt.Errorf("rpr: list services under prefix %q: %w", c.keys.Prefix(), err)
	}
	return slices.Sorted(maps.Keys(found)), nil
}

// Stats returns the queue figures of services, one ServiceStats per lane
// of each (see Service.LaneStats), in the order of services; with no
// service named, of every service Services finds, sorted by name. It is
// the data behind `rpr stats` and `rpr top`: two pipelined round trips per
// service (plus the SCAN when discovering). It stops at the first service
// Redis cannot be read for.
func (c *Client) Stats(ctx context.Context, services ...string) ([]ServiceStats, error) {
	if len(services) == 0 {
		var err error
		if services, err = c.Services(ctx); err != nil {
			return nil, err
		}
	}
	var out []ServiceStats
	for _, name := range services {
		lanes, err := c.Service(name).LaneStats(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, lanes...)
	}
	return out, nil
}

// Trace looks a request up, by request id or by idempotency key (see
// Service.Trace), in every service Services finds, in order, until one
// knows it: neither names its service, nor its shard or lane. When none
// does, the trace has only ID (or Key) and Searched set (Service is "").
// The error is for an argument that is neither an id nor a key and for
// Redis failing.
func (c *Client) Trace(ctx context.Context, idOrKey string) (*RequestTrace, error) {
	tr, err := newTrace(idOrKey)
	if err != nil {
		return nil, err
	}
	services, err := c.Services(ctx)
	if err != nil {
		return nil, err
	}
	for _, name := range services {
		if err := c.Service(name).traceInto(ctx, tr); err != nil {
			return nil, err
		}
		if tr.Service != "" {
			break
		}
	}
	return tr, nil
}
