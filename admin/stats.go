package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
)

// ServiceStats is the queue view of one lane of a service at one moment,
// as Redis reports it: a row of `rpr stats` and `rpr top`. Each figure is
// over all the service's shards: the queues of one lane are its request
// stream and retry set in every shard. A service whose request stream or
// consumer group does not exist (yet, or any more, after a Redis restart
// without persistence) has zeros, not an error.
type ServiceStats struct {
	// Service is the fully qualified service name.
	Service string
	// Lane is the lane whose queues these are (tunnel.DefaultLane, or a
	// lane that a route names or a worker serves); "" in Service.Stats's
	// figures, which are over all lanes.
	Lane string
	// Shards is the service's recorded shard count (Service.Shards).
	Shards int
	// Length is the number of entries in the request streams. Servers
	// delete a request once it is answered, so this is the backlog:
	// requests waiting for a worker plus requests being worked on.
	Length int64
	// EntriesAdded counts every request ever added to the streams (XINFO
	// STREAM entries-added). It only grows, so the difference between two
	// samples is the number of calls enqueued in between; see
	// CallsPerSecond.
	EntriesAdded int64
	// Lag is the number of requests no worker has read yet (XINFO GROUPS
	// lag of the "workers" group), at most Length-Pending. When Redis
	// cannot compute it (entries deleted ahead of the group's position),
	// it is estimated as Length-Pending, which is exact while only
	// finished or withdrawn requests are deleted, as rpr does. A stream
	// without the group (no server ever read it) lags by its length.
	Lag int64
	// Pending is the number of requests read by a worker and not yet
	// acknowledged: running, or held by a worker that died.
	Pending int64
	// OldestPending is the age of the oldest pending request (the oldest
	// over the shards), measured on Redis's clock from the time it was
	// added; 0 when nothing is pending.
	OldestPending time.Duration
	// Consumers is the number of distinct consumers the "workers" groups
	// know (a worker reading several shards is one consumer of each, and
	// counts once). Redis keeps a consumer until it is deleted, so this
	// counts workers that ever read the streams; LiveWorkers counts the
	// ones alive now.
	Consumers int64
	// Retrying is the number of async requests in the retry sets: waiting
	// for a retry after a failure, or for the time they were scheduled at.
	// With Length it makes the backlog the cap applies to.
	Retrying int64
	// DeadLetters is the number of dead letters of the whole service (its
	// dead-letter streams hold the letters of every lane), the same in
	// every lane's figures.
	DeadLetters int64
	// DeadLetterCap is the cap of each of the service's dead-letter
	// streams (one per shard), the smallest that its live workers
	// announce (tunnel.ServerOptions.MaxDeadLetters); 0 when none
	// announces one.
	DeadLetterCap int64
	// DeadLettersFull reports that a dead-letter stream of the service is
	// at DeadLetterCap: servers hold further dead letters back (async
	// requests wait in the retry sets, unreadable entries stay pending)
	// until an operator replays or drops letters.
	DeadLettersFull bool
	// LiveWorkers is the number of workers serving the lane whose
	// heartbeat is recent enough for clients to send them calls (the rule
	// Health uses: a beat within the last 5s).
	LiveWorkers int
	// RedisTime is Redis's clock when the sample was taken.
	RedisTime time.Time
}

// CallsPerSecond returns the rate at which calls were enqueued between an
// earlier sample prev of the same service and lane and s, from the growth
// of EntriesAdded over the time between the samples on Redis's clock. It
// reports false when the two samples cannot be compared: different
// services or lanes, no time between them, or a counter that went
// backwards (a stream was deleted or Redis restarted without its data).
func (s ServiceStats) CallsPerSecond(prev ServiceStats) (float64, bool) {
	elapsed := s.RedisTime.Sub(prev.RedisTime)
	if s.Service != prev.Service || s.Lane != prev.Lane || elapsed <= 0 || s.EntriesAdded < prev.EntriesAdded {
		return 0, false
	}
	return float64(s.EntriesAdded-prev.EntriesAdded) / elapsed.Seconds(), true
}

// Stats returns the queue view of the service over all its lanes and
// shards (Lane ""): what LaneStats reports, added up, at the same cost. It
// fails only when Redis cannot be read.
func (s *Service) Stats(ctx context.Context) (ServiceStats, error) {
	_, total, err := s.inspect(ctx, nil)
	return total, err
}

// LaneStats returns the queue view of each lane of the service: the
// default lane, the lanes its routing table names, those of the workers
// in its heartbeat hash (live, or silent for less than a minute) and the
// lanes moreLanes names (names that are no lane are left out); the default
// lane first, then by name. A lane that is none of these but still holds
// requests (its route removed and its servers long gone) is not found by
// itself: Lanes finds those, by scanning the keyspace, too costly to do at
// every sample, so pass them in moreLanes.
//
// It takes two pipelined round trips: one for Redis's TIME, the worker
// heartbeats, the routing table and the shard count; one for, in each
// shard, XINFO STREAM, XINFO GROUPS, XINFO CONSUMERS and the XPENDING
// summary of each lane's request stream, the size of its retry set, and
// the length of the shard's dead-letter stream. XINFO STREAM also returns
// the stream's first and last entries, so each call transfers up to two
// request payloads per stream; sampling once a second, as `rpr top` does,
// costs little unless requests are megabytes large. It fails only when
// Redis cannot be read.
func (s *Service) LaneStats(ctx context.Context, moreLanes ...string) ([]ServiceStats, error) {
	lanes, _, err := s.inspect(ctx, moreLanes)
	return lanes, err
}

// laneQueueCmds are the commands that read one lane's queues in one shard.
type laneQueueCmds struct {
	requests, retries string
	stream            *redis.XInfoStreamCmd
	groups            *redis.XInfoGroupsCmd
	consumers         *redis.XInfoConsumersCmd
	pending           *redis.XPendingCmd
	retrying          *redis.IntCmd
}

// inspect reads the figures of every lane of the service (with the lanes
// more), and their total.
func (s *Service) inspect(ctx context.Context, more []string) ([]ServiceStats, ServiceStats, error) {
	fail := func(what string, err error) ([]ServiceStats, ServiceStats, error) {
		return nil, ServiceStats{}, fmt.Errorf("rpr: inspect %s: %s: %w", s.name, what, err)
	}
	view, err := s.view(ctx)
	if err != nil {
		return nil, ServiceStats{}, fmt.Errorf("rpr: inspect %s: %w", s.name, err)
	}
	redisNow, shards := view.now, view.shards
	lanes := knownLanes(append(view.routes.Lanes(), more...), view.beats)

	pipe := s.rdb.Pipeline()
	dlq := make([]*redis.IntCmd, shards)
	cmds := make([][]laneQueueCmds, shards) // [shard][lane]
	for shard, sk := range s.keys.Shards(s.name, 0, shards) {
		dlq[shard] = pipe.XLen(ctx, sk.DeadLetters())
		cmds[shard] = make([]laneQueueCmds, len(lanes))
		for i, lane := range lanes {
			c := &cmds[shard][i]
			c.requests, c.retries = sk.Requests(lane), sk.Retries(lane)
			c.stream = pipe.XInfoStream(ctx, c.requests)
			c.groups = pipe.XInfoGroups(ctx, c.requests)
			c.consumers = pipe.XInfoConsumers(ctx, c.requests, store.WorkersGroup)
			c.pending = pipe.XPending(ctx, c.requests, store.WorkersGroup)
			c.retrying = pipe.ZCard(ctx, c.retries)
		}
	}
	// Exec reports the first failed command; the commands are judged one
	// by one below, because a missing stream or group is not a failure.
	_, _ = pipe.Exec(ctx)

	var deadLetters int64
	dlCap, full := view.deadLetterCap(), false
	for shard, cmd := range dlq {
		if err := cmd.Err(); err != nil {
			return fail("XLEN "+s.keys.Shard(s.name, shard).DeadLetters(), err)
		}
		deadLetters += cmd.Val()
		full = full || (dlCap > 0 && cmd.Val() >= dlCap)
	}
	live := view.live()
	total := ServiceStats{Service: s.name, Shards: shards, DeadLetters: deadLetters, DeadLetterCap: dlCap, DeadLettersFull: full, RedisTime: redisNow}
	allConsumers := map[string]bool{}
	out := make([]ServiceStats, len(lanes))
	for i, lane := range lanes {
		st := ServiceStats{Service: s.name, Lane: lane, Shards: shards, DeadLetters: deadLetters,
			DeadLetterCap: dlCap, DeadLettersFull: full, LiveWorkers: live[lane], RedisTime: redisNow}
		consumers := map[string]bool{}
		for shard := range shards {
			if err := addQueueFigures(&st, consumers, &cmds[shard][i]); err != nil {
				return fail(err.what, err.err)
			}
		}
		st.Consumers = int64(len(consumers))
		for name := range consumers {
			allConsumers[name] = true
		}
		out[i] = st
		total.Length += st.Length
		total.EntriesAdded += st.EntriesAdded
		total.Lag += st.Lag
		total.Pending += st.Pending
		total.OldestPending = max(total.OldestPending, st.OldestPending)
		total.Retrying += st.Retrying
		total.LiveWorkers += st.LiveWorkers
	}
	total.Consumers = int64(len(allConsumers))
	return out, total, nil
}

// inspectError names the command whose failure stopped an inspection.
type inspectError struct {
	what string
	err  error
}

// addQueueFigures adds the figures of one lane's queues in one shard (c)
// to st, and the names of the queue's consumers to consumers.
func addQueueFigures(st *ServiceStats, consumers map[string]bool, c *laneQueueCmds) *inspectError {
	var length int64
	if err := c.stream.Err(); err != nil && !absentStreamOrGroup(err) {
		return &inspectError{"XINFO STREAM " + c.requests, err}
	} else if err == nil {
		length = c.stream.Val().Length
		st.Length += length
		st.EntriesAdded += c.stream.Val().EntriesAdded
	}
	if err := c.groups.Err(); err != nil && !absentStreamOrGroup(err) {
		return &inspectError{"XINFO GROUPS " + c.requests, err}
	} else if err == nil {
		grouped := false
		for _, g := range c.groups.Val() {
			if g.Name != store.WorkersGroup {
				continue
			}
			grouped = true
			st.Pending += g.Pending
			// Unread requests are in the stream and not pending, so the
			// lag is at most length-pending; Redis's figure can be more
			// after unread entries were deleted (withdrawn by their
			// callers), and is unknown (-1) when it cannot say.
			unread := max(length-g.Pending, 0)
			if g.Lag >= 0 {
				st.Lag += min(g.Lag, unread)
			} else {
				st.Lag += unread
			}
		}
		if !grouped {
			// No server ever read this stream (a lane routed to before
			// its servers started): none of its requests has been read.
			st.Lag += length
		}
	}
	if err := c.consumers.Err(); err != nil && !absentStreamOrGroup(err) {
		return &inspectError{"XINFO CONSUMERS " + c.requests, err}
	} else if err == nil {
		for _, consumer := range c.consumers.Val() {
			consumers[consumer.Name] = true
		}
	}
	if err := c.pending.Err(); err != nil && !absentStreamOrGroup(err) {
		return &inspectError{"XPENDING " + c.requests, err}
	} else if err == nil && c.pending.Val().Count > 0 {
		if added, ok := streamIDMillis(c.pending.Val().Lower); ok {
			age := max(time.Duration(st.RedisTime.UnixMilli()-added)*time.Millisecond, 0)
			st.OldestPending = max(st.OldestPending, age)
		}
	}
	if err := c.retrying.Err(); err != nil {
		return &inspectError{"ZCARD " + c.retries, err}
	}
	st.Retrying += c.retrying.Val()
	return nil
}
