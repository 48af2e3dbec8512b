package redisinfo

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sample is one reading of one Redis node's counters.
type Sample struct {
	// Commands is the number of commands executed: the sum of calls= over
	// INFO commandstats, commands run inside Lua scripts included, and
	// INFO itself left out so that sampling does not count.
	Commands int64
	// CPU is used_cpu_sys + used_cpu_user.
	CPU time.Duration
	// UsedMemory is used_memory, in bytes.
	UsedMemory int64
	// Reads and Writes count the times Redis read from and wrote to its
	// clients' connections (total_reads_processed and
	// total_writes_processed, Redis 6.0 on; 0 before): a round trip is
	// at least one of each, whatever it carries, so they show how much of
	// Redis's work is per round trip rather than per command.
	Reads, Writes int64
}

// Read takes one Sample from rdb (a single node) in one round trip.
func Read(ctx context.Context, rdb redis.Cmdable) (Sample, error) {
	info, err := rdb.Info(ctx, "commandstats", "cpu", "memory", "stats").Result()
	if err != nil {
		return Sample{}, fmt.Errorf("INFO commandstats cpu memory stats: %w", err)
	}
	var s Sample
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		s.Commands += n
	}
	sys, _ := strconv.ParseFloat(Field(info, "used_cpu_sys"), 64)
	user, _ := strconv.ParseFloat(Field(info, "used_cpu_user"), 64)
	s.CPU = time.Duration((sys + user) * float64(time.Second))
	s.UsedMemory, _ = strconv.ParseInt(Field(info, "used_memory"), 10, 64)
	s.Reads, _ = strconv.ParseInt(Field(info, "total_reads_processed"), 10, 64)
	s.Writes, _ = strconv.ParseInt(Field(info, "total_writes_processed"), 10, 64)
	return s, nil
}

// Sub returns the growth of each counter from before to s.
func (s Sample) Sub(before Sample) Sample {
	return Sample{Commands: s.Commands - before.Commands, CPU: s.CPU - before.CPU, UsedMemory: s.UsedMemory - before.UsedMemory,
		Reads: s.Reads - before.Reads, Writes: s.Writes - before.Writes}
}

// Field returns the value of name in an INFO reply ("" when absent).
func Field(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == name {
			return v
		}
	}
	return ""
}
