package tunnel

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
)

// A caller that gives up on a request asks the arbiter whether it ran;
// "it never ran" holds only if the master that says so is the one that
// held the request when it was sent (the same term, see
// store.TermProbe). Redis replicates asynchronously: a master that dies
// may take with it the record that a worker had read the request, and
// its successor, finding the request undelivered, would withdraw it and
// call it never run while that worker runs it. So each refresh reads
// the term of the masters the service's shards are on, and a verdict of
// "never ran" from another term than the one seen before the send is
// reported as unknown.

// termHistory is how many term changes a log keeps: one per failover
// or restart seen, so a handful covers any call in flight.
const termHistory = 4

// termChange is a term and when it was first seen.
type termChange struct {
	seen time.Time
	term string
}

// termLog is the terms a client has seen a shard's master in, oldest
// first.
type termLog struct {
	mu      sync.Mutex
	changes []termChange
}

// observe records that a probe answered by seen found term. A probe
// that returns after a later one is dropped: that only makes the log
// know less, which can only turn a "never ran" into "unknown".
func (l *termLog) observe(term string, seen time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.changes); n > 0 {
		last := l.changes[n-1]
		if seen.Before(last.seen) || term == last.term {
			return
		}
	}
	if len(l.changes) == termHistory {
		l.changes = append(l.changes[:0], l.changes[1:]...)
	}
	l.changes = append(l.changes, termChange{seen: seen, term: term})
}

// before returns the term of the last probe answered before t, "" when
// the log holds none that old.
func (l *termLog) before(t time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.changes) - 1; i >= 0; i-- {
		if l.changes[i].seen.Before(t) {
			return l.changes[i].term
		}
	}
	return ""
}

// shardTerms are the term logs of a service's shards: one per shard in
// a Cluster, where each shard's master is its own, and one for all of
// them otherwise.
type shardTerms struct {
	perShard bool
	logs     [MaxShards]termLog
}

// of returns the log of shard's master.
func (t *shardTerms) of(shard int) *termLog {
	if !t.perShard {
		return &t.logs[0]
	}
	return &t.logs[shard]
}

// sameTerm reports whether the arbiter's "never ran" for a request sent
// to shard at sentAt was settled by the term that held it then. Where
// Redis refuses INFO to the client both terms are store.TermRefused,
// and the verdict is taken as it is, as before terms were compared
// (observeTerms warns of it).
func (s *clientService) sameTerm(shard int, sentAt time.Time, settled store.Settled) bool {
	return settled.Term != "" && settled.Term == s.terms.of(shard).before(sentAt)
}

// queueTermProbes queues on pipe the probes of the masters of s's shards
// from to to-1: one probe each in a Cluster, one for them all otherwise
// (none when from is not 0: shard 0's probe is theirs).
func (c *Client) queueTermProbes(ctx context.Context, pipe redis.Pipeliner, s *clientService, from, to int) []*store.TermProbe {
	if !s.terms.perShard {
		to = min(to, 1)
	}
	probes := make([]*store.TermProbe, max(to-from, 0))
	for i := range probes {
		probes[i] = store.NewTermProbe(c.keys.Shard(s.name, from+i).Requests(DefaultLane))
		probes[i].Queue(ctx, pipe)
	}
	return probes
}

// observeTerms records what the probes of shards from on found, once
// their pipeline ran. A probe Redis refused is not recorded; one that
// found INFO refused is, with a warning: a failover can then go
// unnoticed.
func (c *Client) observeTerms(ctx context.Context, s *clientService, from int, probes []*store.TermProbe) {
	for i, p := range probes {
		p.Recover(ctx, c.rdb)
		term, err := p.Result()
		if err != nil {
			continue
		}
		seen := time.Now() // after its reply: the term held before this
		if term == store.TermRefused && s.termsWarned.CompareAndSwap(false, true) {
			c.log.Warn("rpr: Redis refuses INFO to this client, so it cannot tell a failover happened while a call that timed out or was cancelled waited, and may report it not executed when a worker of the master that failed ran it; grant +info|server and +info|replication (rpr acl caller prints the rules)", "service", s.name)
		}
		s.terms.of(from+i).observe(term, seen)
	}
}

// probeTerms reads the terms of the masters of s's shards from to to-1 in
// one round trip, for shards a refresh did not probe.
func (c *Client) probeTerms(ctx context.Context, s *clientService, from, to int) {
	pipe := c.rdb.Pipeline()
	probes := c.queueTermProbes(ctx, pipe, s, from, to)
	if len(probes) == 0 {
		return
	}
	_, _ = pipe.Exec(ctx) // each probe is judged by observeTerms
	c.observeTerms(ctx, s, from, probes)
}
