package tunnel

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServiceStats is the queue view of one service at one moment, as Redis
// reports it: what `rpr stats` and `rpr top` print. A service whose request
// stream or consumer group does not exist (yet, or any more, after a Redis
// restart without persistence) has zeros, not an error.
type ServiceStats struct {
	// Service is the fully qualified service name.
	Service string
	// Length is the number of entries in the request stream. Servers
	// delete a request once it is answered, so this is the backlog:
	// requests waiting for a worker plus requests being worked on.
	Length int64
	// EntriesAdded counts every request ever added to the stream (XINFO
	// STREAM entries-added). It only grows, so the difference between two
	// samples is the number of calls enqueued in between; see
	// CallsPerSecond.
	EntriesAdded int64
	// Lag is the number of requests no worker has read yet (XINFO GROUPS
	// lag of the "workers" group). When Redis cannot compute it (entries
	// deleted ahead of the group's position), it is estimated as
	// Length-Pending, which is exact while only finished requests are
	// deleted, as rpr does.
	Lag int64
	// Pending is the number of requests read by a worker and not yet
	// acknowledged: running, or held by a worker that died.
	Pending int64
	// OldestPending is the age of the oldest pending request, measured on
	// Redis's clock from the time it was added; 0 when nothing is pending.
	OldestPending time.Duration
	// Consumers is the number of consumers the "workers" group knows.
	// Redis keeps a consumer until it is deleted, so this counts workers
	// that ever read the stream; LiveWorkers counts the ones alive now.
	Consumers int64
	// Retrying is the number of async requests in the service's retry set:
	// waiting for a retry after a failure, or for the time they were
	// scheduled at. With Length it makes the backlog the cap applies to.
	Retrying int64
	// DeadLetters is the length of the service's dead-letter stream.
	DeadLetters int64
	// LiveWorkers is the number of workers whose heartbeat is recent
	// enough for clients to send them calls (the rule CheckHealth uses: a
	// beat within the last 5s).
	LiveWorkers int
	// RedisTime is Redis's clock when the sample was taken.
	RedisTime time.Time
}

// CallsPerSecond returns the rate at which calls were enqueued between an
// earlier sample prev of the same service and s, from the growth of
// EntriesAdded over the time between the samples on Redis's clock. It
// reports false when the two samples cannot be compared: different
// services, no time between them, or a counter that went backwards (the
// stream was deleted or Redis restarted without its data).
func (s ServiceStats) CallsPerSecond(prev ServiceStats) (float64, bool) {
	elapsed := s.RedisTime.Sub(prev.RedisTime)
	if s.Service != prev.Service || elapsed <= 0 || s.EntriesAdded < prev.EntriesAdded {
		return 0, false
	}
	return float64(s.EntriesAdded-prev.EntriesAdded) / elapsed.Seconds(), true
}

// InspectService reads the queue view of service under prefix ("" for
// DefaultPrefix) in one pipelined round trip: XINFO STREAM and XINFO GROUPS
// of the request stream, the XPENDING summary of the "workers" group, the
// length of the dead-letter stream, the size of the retry set, the worker
// heartbeats and Redis's TIME. It fails only when Redis cannot be read.
//
// XINFO STREAM also returns the stream's first and last entries, so each
// call transfers up to two request payloads; sampling once a second, as
// `rpr top` does, costs little unless requests are megabytes large.
func InspectService(ctx context.Context, rdb redis.UniversalClient, prefix, service string) (ServiceStats, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	keys := keyspace{prefix: prefix}
	requests := keys.shard(service, 0).requests("")
	pipe := rdb.Pipeline()
	now := pipe.Time(ctx)
	stream := pipe.XInfoStream(ctx, requests)
	groups := pipe.XInfoGroups(ctx, requests)
	pending := pipe.XPending(ctx, requests, workersGroup)
	dlq := pipe.XLen(ctx, keys.shard(service, 0).deadLetters())
	retrying := pipe.ZCard(ctx, keys.shard(service, 0).retries(""))
	beats := pipe.HGetAll(ctx, keys.workers(service))
	// Exec reports the first failed command; the commands are judged one
	// by one below, because a missing stream or group is not a failure.
	_, _ = pipe.Exec(ctx)

	fail := func(what string, err error) (ServiceStats, error) {
		return ServiceStats{}, fmt.Errorf("rpr: inspect %s: %s: %w", service, what, err)
	}
	if err := now.Err(); err != nil {
		return fail("TIME", err)
	}
	st := ServiceStats{Service: service, RedisTime: now.Val()}
	if err := stream.Err(); err != nil && !absentStreamOrGroup(err) {
		return fail("XINFO STREAM "+requests, err)
	} else if err == nil {
		st.Length = stream.Val().Length
		st.EntriesAdded = stream.Val().EntriesAdded
	}
	if err := groups.Err(); err != nil && !absentStreamOrGroup(err) {
		return fail("XINFO GROUPS "+requests, err)
	} else if err == nil {
		for _, g := range groups.Val() {
			if g.Name != workersGroup {
				continue
			}
			st.Pending = g.Pending
			st.Consumers = g.Consumers
			st.Lag = g.Lag
			if g.Lag < 0 {
				st.Lag = max(st.Length-g.Pending, 0)
			}
		}
	}
	if err := pending.Err(); err != nil && !absentStreamOrGroup(err) {
		return fail("XPENDING "+requests, err)
	} else if err == nil && pending.Val().Count > 0 {
		if added, ok := streamIDMillis(pending.Val().Lower); ok {
			st.OldestPending = max(time.Duration(st.RedisTime.UnixMilli()-added)*time.Millisecond, 0)
		}
	}
	if err := dlq.Err(); err != nil {
		return fail("XLEN "+keys.shard(service, 0).deadLetters(), err)
	}
	st.DeadLetters = dlq.Val()
	if err := retrying.Err(); err != nil {
		return fail("ZCARD "+keys.shard(service, 0).retries(""), err)
	}
	st.Retrying = retrying.Val()
	if err := beats.Err(); err != nil {
		return fail("HGETALL "+keys.workers(service), err)
	}
	st.LiveWorkers = countLiveWorkers(beats.Val(), st.RedisTime.UnixMilli())
	return st, nil
}

// absentStreamOrGroup reports whether err is Redis saying the stream or the
// consumer group does not exist ("ERR no such key", "NOGROUP ...").
func absentStreamOrGroup(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "NOGROUP") || strings.Contains(msg, "no such key")
}

// streamIDMillis returns the millisecond part of a stream entry id
// ("1764434400123-0"), which for ids Redis generated is when the entry was
// added, on Redis's clock.
func streamIDMillis(id string) (int64, bool) {
	ms, _, _ := strings.Cut(id, "-")
	v, err := strconv.ParseInt(ms, 10, 64)
	return v, err == nil
}

// InspectAll inspects the services under prefix ("" for DefaultPrefix):
// the ones named, or, when none is named, every service ListServices finds
// (a published schema or worker heartbeats). Results follow the order of
// services (sorted by name when discovered). It is the data behind
// `rpr stats` and `rpr top`.
func InspectAll(ctx context.Context, rdb redis.UniversalClient, prefix string, services ...string) ([]ServiceStats, error) {
	if len(services) == 0 {
		var err error
		if services, err = ListServices(ctx, rdb, prefix); err != nil {
			return nil, err
		}
	}
	out := make([]ServiceStats, 0, len(services))
	for _, svc := range services {
		st, err := InspectService(ctx, rdb, prefix, svc)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}
