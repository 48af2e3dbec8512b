package main

// Goal 6: what idle rpr processes cost a Redis: memory and connections per
// idle client instance and per idle server, and the commands per second
// they send while they have nothing to do.

import (
	"context"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/bench/internal/compare"
)

// idleServerTarget is goal 6's "a few commands per second" for a server
// with nothing to do.
const idleServerTarget = 5

const (
	idleClients = 10
	idleServers = 3
)

// idleRun is the idle section's state: the Redis it measures and what it
// has started, all stopped by close.
type idleRun struct {
	s        *settings
	log      io.Writer
	redis    *compare.RedisServer
	admin    *redis.Client
	children []*compare.Child
	clients  []*compare.RPRClients
}

func runIdle(ctx context.Context, s *settings, log io.Writer) ([]compare.Row, error) {
	r := &idleRun{s: s, log: log}
	defer r.close()
	if err := r.freshRedis(); err != nil {
		return nil, err
	}
	var rows []compare.Row

	// Client instances that have made no call.
	first, all, rate, err := r.grow(ctx, "idle client (no calls)", idleClients, r.startClients(false))
	if err != nil {
		return nil, err
	}
	rows = append(rows, r.rows("idle client instance, no calls", first, all, idleClients, rate, compare.NoTarget)...)
	r.stopAll()
	if err := r.freshRedis(); err != nil {
		return nil, err
	}

	// Servers with the echo service registered and nothing to do.
	start := func(ctx context.Context, n int) error {
		for range n {
			c, err := compare.StartChild(ctx, "rpr "+r.redis.URL())
			if err != nil {
				return err
			}
			r.children = append(r.children, c)
		}
		return nil
	}
	if first, all, rate, err = r.grow(ctx, "idle server", idleServers, start); err != nil {
		return nil, err
	}
	rows = append(rows, r.rows("idle server (echo registered)", first, all, idleServers, rate, compare.NoTarget)...)
	sentRate, err := r.sentRate(ctx, r.children[0])
	if err != nil {
		return nil, err
	}
	rows = append(rows, compare.Row{Goal: 6, Figure: fmt.Sprintf("commands/s one idle server sends (a script run counts once), over %v", r.s.idleWindow),
		RPR: sentRate, Baseline: math.NaN(), Target: compare.AtMost(idleServerTarget)})

	// Client instances idle after one call each (the servers still up to
	// answer it), their commands counted with the servers gone.
	before, err := r.sample(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.startClients(true)(ctx, idleClients); err != nil {
		return nil, err
	}
	r.settle(ctx)
	after, err := r.sample(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range r.children {
		c.Stop()
	}
	r.children = nil
	r.settle(ctx)
	n, err := r.rate(ctx)
	if err != nil {
		return nil, err
	}
	// The same clients counted again, each now past the quiet spell
	// after which a client stops refreshing an unused service's state.
	quiet, err := r.rate(ctx)
	if err != nil {
		return nil, err
	}
	warm := grew(after, before)
	fmt.Fprintf(log, "  %d clients after one call: %+d B used_memory, %+d connections; %.2f commands/s together, %.2f once quiet\n", idleClients, warm.UsedMemory, warm.ConnectedClients, n, quiet)
	rows = append(rows, r.rows("idle client instance after one call", math.NaN(), warm, idleClients, n/idleClients, compare.NoTarget)[1:]...)
	return append(rows, compare.Row{Goal: 6, Figure: fmt.Sprintf("Redis commands/s per idle client instance after one call, the next %v", r.s.idleWindow),
		RPR: quiet / idleClients, Baseline: math.NaN(), Target: compare.NoTarget}), nil
}

// delta is the growth of the idle figures between two samples.
type delta struct{ UsedMemory, ConnectedClients int64 }

// grew is the growth from sample b to sample a.
func grew(a, b sample) delta {
	return delta{a.UsedMemory - b.UsedMemory, a.ConnectedClients - b.ConnectedClients}
}

type sample = compare.RedisIdle

// grow samples Redis, starts one of a thing, samples it again and counts
// the commands Redis runs over the window with that one alone, then
// starts n-1 more and samples again. first is the first one's memory; all
// the growth for all n; rate the first one's commands/s.
func (r *idleRun) grow(ctx context.Context, what string, n int, start func(context.Context, int) error) (first float64, all delta, rate float64, err error) {
	s0, err := r.sample(ctx)
	if err != nil {
		return 0, delta{}, 0, err
	}
	if err := start(ctx, 1); err != nil {
		return 0, delta{}, 0, err
	}
	r.settle(ctx)
	s1, err := r.sample(ctx)
	if err != nil {
		return 0, delta{}, 0, err
	}
	if rate, err = r.rate(ctx); err != nil {
		return 0, delta{}, 0, err
	}
	if err := start(ctx, n-1); err != nil {
		return 0, delta{}, 0, err
	}
	r.settle(ctx)
	sn, err := r.sample(ctx)
	if err != nil {
		return 0, delta{}, 0, err
	}
	d1, dn := grew(s1, s0), grew(sn, s0)
	fmt.Fprintf(r.log, "  1 %s: %+d B used_memory, %+d connections, %.2f commands/s; %d of them: %+d B, %+d connections\n",
		what, d1.UsedMemory, d1.ConnectedClients, rate, n, dn.UsedMemory, dn.ConnectedClients)
	return float64(d1.UsedMemory), dn, rate, ctx.Err()
}

// rows are a thing's rows: memory of the first one, memory and
// connections per one of n, and one's commands/s.
func (r *idleRun) rows(what string, first float64, all delta, n int, rate float64, rateTarget compare.Target) []compare.Row {
	row := func(figure string, v float64, t compare.Target) compare.Row {
		return compare.Row{Goal: 6, Figure: figure, RPR: v, Baseline: math.NaN(), Target: t}
	}
	return []compare.Row{
		row(fmt.Sprintf("Redis used_memory B, the first %s", what), first, compare.NoTarget),
		row(fmt.Sprintf("Redis used_memory B per %s (%d)", what, n), float64(all.UsedMemory)/float64(n), compare.NoTarget),
		row(fmt.Sprintf("Redis connections per %s (%d)", what, n), float64(all.ConnectedClients)/float64(n), compare.NoTarget),
		row(fmt.Sprintf("Redis commands/s per %s, over %v", what, r.s.idleWindow), rate, rateTarget),
	}
}

// startClients returns a start function of idle client instances, each
// making one call first when call is set.
func (r *idleRun) startClients(call bool) func(context.Context, int) error {
	return func(ctx context.Context, n int) error {
		c, err := compare.StartRPRClients(ctx, r.redis.URL(), n)
		if err != nil {
			return err
		}
		r.clients = append(r.clients, c)
		if call {
			return c.WaitServed(ctx)
		}
		return nil
	}
}

// sentRate is the commands child sends to Redis per second over the
// idle window, by its own count.
func (r *idleRun) sentRate(ctx context.Context, child *compare.Child) (float64, error) {
	return r.perSecond(ctx, func(ctx context.Context) (int64, error) {
		st, err := child.Stats(ctx)
		return int64(st.Sent), err
	})
}

// rate is the commands Redis runs per second over the idle window.
func (r *idleRun) rate(ctx context.Context) (float64, error) {
	return r.perSecond(ctx, func(ctx context.Context) (int64, error) {
		s, err := r.sample(ctx)
		return s.Commands, err
	})
}

// perSecond is how fast the counter count grows over the idle window.
func (r *idleRun) perSecond(ctx context.Context, count func(context.Context) (int64, error)) (float64, error) {
	a, err := count(ctx)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	r.wait(ctx, r.s.idleWindow)
	b, err := count(ctx)
	if err != nil {
		return 0, err
	}
	return float64(b-a) / time.Since(t0).Seconds(), ctx.Err()
}

// freshRedis stops the Redis of the section, if any, and starts another:
// what the clients left behind does not count against the servers.
func (r *idleRun) freshRedis() error {
	r.stopRedis()
	var err error
	if r.redis, err = compare.StartRedis(r.s.redisBin); err != nil {
		return err
	}
	opts, err := redis.ParseURL(r.redis.URL())
	if err != nil {
		return err
	}
	r.admin = redis.NewClient(opts)
	fmt.Fprintf(r.log, "  redis-server %s on %s\n", r.redis.Version, r.redis.URL())
	return nil
}

func (r *idleRun) stopRedis() {
	if r.admin != nil {
		r.admin.Close()
	}
	if r.redis != nil {
		r.redis.Stop()
	}
	r.admin, r.redis = nil, nil
}

func (r *idleRun) sample(ctx context.Context) (sample, error) {
	return compare.ReadRedisIdle(ctx, r.admin)
}

// settle gives what was just started or stopped time to reach its steady
// state (readers blocked, heartbeats written, connections closed).
func (r *idleRun) settle(ctx context.Context) { r.wait(ctx, r.s.settle) }

func (r *idleRun) wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// stopAll stops every client and child started so far and lets Redis see
// them gone.
func (r *idleRun) stopAll() {
	for _, c := range r.clients {
		c.Close()
	}
	for _, c := range r.children {
		c.Stop()
	}
	r.clients, r.children = nil, nil
}

func (r *idleRun) close() {
	r.stopAll()
	r.stopRedis()
}
