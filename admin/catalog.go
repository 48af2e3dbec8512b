package admin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/protoopts"
	"github.com/rprtunnel/rpr/tunnel"
)

// catalog is what RegisterMetrics knows of the deployment between
// discoveries: which services to export and each one's backlog cap. It
// reads them again once they are older than its interval, at the next
// collection (no goroutine of its own).
type catalog struct {
	c      *Client
	pinned []string // the services to export; nil: discover them
	every  time.Duration
	now    func() time.Time

	mu       sync.Mutex
	services []string
	caps     map[string]int64
	read     time.Time // when services and caps were read; zero: never
}

// newCatalog returns the catalog of c's deployment: pinned services, or
// the ones Client.Services finds, reread every every (0:
// DefaultDiscoveryInterval).
func newCatalog(c *Client, pinned []string, every time.Duration) *catalog {
	if every <= 0 {
		every = DefaultDiscoveryInterval
	}
	return &catalog{c: c, pinned: pinned, every: every, now: time.Now}
}

// get returns the services to export and their caps, read again when the
// last reading is older than the interval. When reading them again fails,
// it returns the last ones read (none, the first time) with the error.
func (k *catalog) get(ctx context.Context) ([]string, map[string]int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.read.IsZero() && k.now().Sub(k.read) < k.every {
		return k.services, k.caps, nil
	}
	services := k.pinned
	if len(services) == 0 {
		var err error
		if services, err = k.c.Services(ctx); err != nil {
			return k.services, k.caps, err
		}
	}
	caps, err := k.c.capacities(ctx, services)
	if err != nil {
		return k.services, k.caps, err
	}
	k.services, k.caps, k.read = services, caps, k.now()
	return services, caps, nil
}

// capacities reads the backlog cap of each of services from its published
// schema ((rpr.v1.service).max_backlog), in one pipelined round trip; a
// service without a schema, or whose schema sets no cap, has
// tunnel.DefaultMaxBacklog.
func (c *Client) capacities(ctx context.Context, services []string) (map[string]int64, error) {
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(services))
	for i, name := range services {
		cmds[i] = pipe.Get(ctx, c.keys.Schema(name))
	}
	_, _ = pipe.Exec(ctx)
	caps := make(map[string]int64, len(services))
	for i, name := range services {
		caps[name] = tunnel.DefaultMaxBacklog
		raw, err := cmds[i].Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("rpr: read the schema of %s for its backlog cap: %w", name, err)
		}
		svc := c.Service(name)
		files, err := svc.parseSchema(raw)
		if err != nil {
			continue // the cap stays the default; Service.Schema reports the problem
		}
		sd, err := ServiceInFiles(files, name)
		if err != nil {
			continue
		}
		if opts, _ := protoopts.ReadService(sd); opts.MaxBacklog > 0 {
			caps[name] = opts.MaxBacklog
		}
	}
	return caps, nil
}
