package acl

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rprtunnel/rpr/internal/store"
)

// ForCaller returns the user of a caller of services (a tunnel.Client
// that calls them): see the package doc for what it may and may not do.
// Each selector groups keys that take the same commands:
//
//   - the keys rpr's client scripts (arbiter, enqueue, limit) are given,
//     with EVALSHA and EVAL only (Redis checks the scripts' own commands
//     against the other selectors);
//   - request streams: XADD, XDEL, XLEN, write permission only;
//     and XPENDING with read permission, alone;
//   - retry sets: ZADD, ZCARD; workers' inboxes: XADD;
//   - request states: HGET, HSET, PEXPIRE;
//   - rate-limit counters: what the limit script runs;
//   - the workers hash, routes, limits and shard count: HGETALL and GET,
//     read permission only;
//   - its own response streams: what the client reads them with;
//   - the cancel channel (PUBLISH) and the route-change channel
//     (SUBSCRIBE);
//   - INFO server and INFO replication, whose run_id and master_replid
//     tell it whether Redis restarted or failed over while a call it
//     gave up on waited (the arbiter's "never ran" would not hold).
func ForCaller(services []string, opts Options) (User, error) {
	if err := checkServices(services); err != nil {
		return User{}, fmt.Errorf("rpr acl caller: %w", err)
	}
	keys, name, rules, err := begin(Caller, services, opts)
	if err != nil {
		return User{}, fmt.Errorf("rpr acl caller: %w", err)
	}
	reqs := perShard(keys, services, requests)
	rets := perShard(keys, services, retries)
	states := perShard(keys, services, func(sk store.Shard) []string { return []string{sk.State("*")} })
	inboxes := perShard(keys, services, func(sk store.Shard) []string { return []string{sk.Inbox("*")} })
	responses := perShard(keys, services, func(sk store.Shard) []string { return []string{sk.Responses(opts.ClientID + "*")} })
	rates := perService(services, func(s string) []string { return []string{keys.RateKey(s, "*")} })
	config := perService(services, func(s string) []string {
		return []string{keys.Workers(s), keys.Routes(s), keys.Limits(s), keys.ShardCount(s)}
	})
	cancels := perService(services, func(s string) []string { return []string{keys.Cancels(s)} })
	changes := perService(services, func(s string) []string { return []string{keys.RoutesChanged(s)} })

	rules = append(rules, "+publish", "+unsubscribe", "+info|server", "+info|replication")
	rules = append(rules, channels(cancels)...)
	rules = append(rules,
		selector("~", slices.Concat(reqs, rets, states, rates), "evalsha", "eval"),
		selector("%W~", reqs, "xadd", "xdel", "xlen"),
		selector("%R~", reqs, "xpending"),
		selector("%W~", rets, "zadd", "zcard"),
		selector("%W~", inboxes, "xadd"),
		selector("~", states, "hget", "hset", "pexpire"),
		selector("~", rates, "zremrangebyscore", "zcard", "zrange", "zadd", "pexpire", "get", "set", "del"),
		selector("%R~", config, "hgetall", "get"),
		selector("~", responses, "xgroup|create", "xreadgroup", "xrange", "xtrim", "pexpire", "del"),
		"("+strings.Join(channels(changes), " ")+" +subscribe)",
	)
	if opts.Upstreams {
		rules = append(rules, upstreamRules(keys, services)...)
	}
	return User{Name: name, Role: Caller, Prefix: keys.Prefix(), Services: slices.Clone(services), Rules: rules}, nil
}

// serverCommands are what a server runs on its services' queue keys,
// directly and inside its scripts.
var serverCommands = []string{
	"xreadgroup", "xread", "xack", "xadd", "xdel", "xautoclaim", "xclaim", "xpending",
	"xgroup|create", "xgroup|delconsumer", "xinfo|groups", "xinfo|consumers", "xinfo|stream",
	"xtrim", "xrange", "xlen", "exists", "type",
	"hget", "hmget", "hset", "hdel", "hexists", "hgetall", "pexpire", "del", "set", "get",
	"zadd", "zrange", "zrangebyscore", "zrem", "zcard",
}

// ForServer returns the user of a server of services (a tunnel.Server
// that serves them): every command serving runs on the services' queue
// keys (request streams and their group, retry sets, states, finished
// records, inboxes, dead letters, worker heartbeats, schemas and shard
// count) and their cancel and handoff channels; XADD, TYPE and EXISTS on
// callers' response streams, write permission only (the scripts that
// answer are given them, so EVALSHA and EVAL get them in a selector of
// their own), and PTTL on them, read permission only (a server ends the
// streams of a caller that stopped renewing its response stream);
// nothing on routes, limits or rate-limit counters.
func ForServer(services []string, opts Options) (User, error) {
	if err := checkServices(services); err != nil {
		return User{}, fmt.Errorf("rpr acl server: %w", err)
	}
	keys, name, rules, err := begin(Server, services, opts)
	if err != nil {
		return User{}, fmt.Errorf("rpr acl server: %w", err)
	}
	queues := perShard(keys, services, func(sk store.Shard) []string {
		return slices.Concat(requests(sk), retries(sk),
			[]string{sk.State("*"), sk.Done("*"), sk.Inbox("*"), sk.DeadLetters(), sk.Workers()})
	})
	wide := perService(services, func(s string) []string {
		return []string{keys.Schema(s), keys.Schemas(s), keys.ShardCount(s)}
	})
	responses := perShard(keys, services, func(sk store.Shard) []string { return []string{sk.Responses("*")} })
	chans := perService(services, func(s string) []string { return []string{keys.Cancels(s), keys.Handoffs(s)} })

	own := slices.Concat(queues, wide)
	for _, p := range own {
		rules = append(rules, "~"+p)
	}
	rules = append(rules, channels(chans)...)
	for _, c := range serverCommands {
		rules = append(rules, "+"+c)
	}
	rules = append(rules, "+publish", "+subscribe", "+unsubscribe",
		selector("~", slices.Concat(own, responses), "evalsha", "eval"),
		selector("%W~", responses, "xadd", "type", "exists"),
		selector("%R~", responses, "pttl"),
	)
	if opts.Upstreams {
		rules = append(rules, upstreamRules(keys, services)...)
	}
	return User{Name: name, Role: Server, Prefix: keys.Prefix(), Services: slices.Clone(services), Rules: rules}, nil
}
