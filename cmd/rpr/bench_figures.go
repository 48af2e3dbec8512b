package main

// The figures rpr bench measures besides the calls: Redis's command and
// CPU counters, and a latency histogram.

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redisinfo"
)

// benchRedisFigures is one sample of Redis's counters.
type benchRedisFigures struct {
	commands int64   // commands executed, INFO excluded
	cpu      float64 // seconds of CPU, user + system
}

// benchSampleRedis reads the commands Redis has executed (the sum of
// calls= over INFO commandstats, INFO's own line left out, so sampling
// does not count) and its CPU time (INFO cpu used_cpu_sys +
// used_cpu_user). A Cluster is summed over its masters. The embedded Redis
// has neither: its total_commands_processed (INFO stats) stands in for the
// commands and its CPU is not known.
func benchSampleRedis(ctx context.Context, rdb redis.UniversalClient, embedded bool) (benchRedisFigures, error) {
	if embedded {
		info, err := rdb.Info(ctx, "stats").Result()
		if err != nil {
			return benchRedisFigures{}, fmt.Errorf("INFO stats: %w", err)
		}
		n, _ := strconv.ParseInt(redisinfo.Field(info, "total_commands_processed"), 10, 64)
		return benchRedisFigures{commands: n}, nil
	}
	one := func(ctx context.Context, c *redis.Client) (benchRedisFigures, error) {
		s, err := redisinfo.Read(ctx, c)
		return benchRedisFigures{commands: s.Commands, cpu: s.CPU.Seconds()}, err
	}
	switch c := rdb.(type) {
	case *redis.Client:
		return one(ctx, c)
	case *redis.ClusterClient:
		var mu sync.Mutex
		var total benchRedisFigures
		err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			f, err := one(ctx, node)
			mu.Lock()
			total.commands += f.commands
			total.cpu += f.cpu
			mu.Unlock()
			return err
		})
		return total, err
	}
	return benchRedisFigures{}, fmt.Errorf("cannot read INFO through a %T", rdb)
}

// benchHistogram is a log-linear latency histogram: each power of two of
// nanoseconds is split into 64 buckets, so a quantile is off by under 1.6%
// and recording allocates nothing.
type benchHistogram struct {
	buckets [benchBuckets]int64
	count   int64
	sum     time.Duration
	max     time.Duration
}

const (
	benchSubBits = 6
	benchBuckets = (64 - benchSubBits + 1) << benchSubBits
)

func benchBucket(ns int64) int {
	if ns < 1<<benchSubBits {
		return int(max(ns, 0))
	}
	k := bits.Len64(uint64(ns)) - 1
	sub := int(ns>>(k-benchSubBits)) & (1<<benchSubBits - 1)
	return (k-benchSubBits+1)<<benchSubBits + sub
}

// benchBucketMid returns the middle of bucket b, in nanoseconds.
func benchBucketMid(b int) float64 {
	if b < 1<<benchSubBits {
		return float64(b)
	}
	k := b>>benchSubBits + benchSubBits - 1
	sub := b & (1<<benchSubBits - 1)
	width := float64(uint64(1) << (k - benchSubBits))
	return float64(uint64(1)<<k) + float64(sub)*width + width/2
}

func (h *benchHistogram) record(d time.Duration) {
	h.buckets[benchBucket(int64(d))]++
	h.count++
	h.sum += d
	h.max = max(h.max, d)
}

func (h *benchHistogram) merge(o *benchHistogram) {
	for i, n := range o.buckets {
		h.buckets[i] += n
	}
	h.count += o.count
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile returns the q-quantile in nanoseconds (never above the maximum).
func (h *benchHistogram) quantile(q float64) float64 {
	if h.count == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.count)))
	rank = min(max(rank, 1), h.count)
	var seen int64
	for b, n := range h.buckets {
		seen += n
		if seen >= rank {
			return min(benchBucketMid(b), float64(h.max))
		}
	}
	return float64(h.max)
}

func (h *benchHistogram) latency() benchLatency {
	ms := func(ns float64) float64 { return ns / 1e6 }
	l := benchLatency{
		P50: ms(h.quantile(0.50)), P90: ms(h.quantile(0.90)), P99: ms(h.quantile(0.99)), P999: ms(h.quantile(0.999)),
		Max: ms(float64(h.max)),
	}
	if h.count > 0 {
		l.Mean = ms(float64(h.sum) / float64(h.count))
	}
	return l
}
