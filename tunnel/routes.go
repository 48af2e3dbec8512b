package tunnel

import (
	"context"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/wire"
)

// A service's routing table sends calls to lanes: each lane is its own
// request queue, served by the servers that joined it (ServerOptions.Lane),
// so a new version can take a slice of the traffic, or only the calls a
// header marks, without a redeploy.
//
// The table lives in the hash rpr:v1:{S}:routes, one field per method
// pattern ("pkg.Svc/Method", or "pkg.Svc/*" for every method), each holding
// an ordered list of rules. A call is routed by the rules of its exact
// method pattern, then by those of the service wildcard; within a pattern
// the first rule that matches wins; when none does, the call goes to the
// default lane. A rule matches when each of its headers has the given value
// (a rule without headers always matches), and it then picks one of its
// lanes at random by weight.
//
// Clients keep the table in memory: a change is announced on Pub/Sub
// (operators change the table with admin.Routes, which announces it) and
// every client also reloads the table every second, so a change applies
// within a second, without a restart, even if the announcement is lost.

// clientRoutes is what a client holds of a service's routing table.
type clientRoutes struct {
	table atomic.Pointer[wire.RouteTable]
	raw   atomic.Pointer[map[string]string] // the hash last read, to skip reparsing
}

// observe records the routes hash as last read; it returns the errors of
// the entries that did not decode, the first time it sees them.
func (r *clientRoutes) observe(service string, hash map[string]string) []error {
	if last := r.raw.Load(); last != nil && maps.Equal(*last, hash) {
		return nil
	}
	table, errs := wire.ParseRouteTable(service, hash)
	r.table.Store(&table)
	r.raw.Store(&hash)
	return errs
}

// lane returns the lane of a call to method with header.
func (r *clientRoutes) lane(service, method string, header Metadata) string {
	t := r.table.Load()
	if t == nil || len(*t) == 0 {
		return DefaultLane
	}
	if _, _, rule := t.Resolve(service, method, header); rule != nil {
		return rule.Pick(rand.Float64())
	}
	return DefaultLane
}

// lanes returns the lanes the table names.
func (r *clientRoutes) lanes() []string {
	if t := r.table.Load(); t != nil {
		return t.Lanes()
	}
	return nil
}

// routeWatcher hands the announcements of routing-table changes (on
// store.Keyspace.RoutesChanged) to the watchers of the services a client calls, over
// one Pub/Sub connection per client.
type routeWatcher struct {
	ctx context.Context // ends when the client closes
	rdb redis.UniversalClient
	wg  *sync.WaitGroup // the client's

	mu    sync.Mutex
	sub   *redis.PubSub
	kicks map[string]chan struct{} // channel -> the service watcher's kick
}

// watch subscribes to channel and kicks kick on each announcement.
func (w *routeWatcher) watch(channel string, kick chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() != nil {
		return
	}
	if w.kicks == nil {
		w.kicks = map[string]chan struct{}{}
	}
	w.kicks[channel] = kick
	if w.sub != nil {
		_ = w.sub.Subscribe(w.ctx, channel) // if lost, the periodic reload still applies changes
		return
	}
	w.sub = w.rdb.Subscribe(w.ctx, channel)
	msgs := w.sub.Channel()
	w.wg.Go(func() {
		for msg := range msgs {
			w.mu.Lock()
			kick := w.kicks[msg.Channel]
			w.mu.Unlock()
			select {
			case kick <- struct{}{}:
			default: // a refresh is already due
			}
		}
	})
}

// close ends the subscription and its goroutine.
func (w *routeWatcher) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sub != nil {
		_ = w.sub.Close()
	}
}
