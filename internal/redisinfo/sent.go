package redisinfo

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Sent is a go-redis hook counting what a client sends, the other side of
// what Sample reads: commands (a script call counts once, each command of
// a pipeline once) and round trips (a pipeline counts once). INFO, which
// measurements send to take a Sample, is not counted. Install it with
// AddHook; the zero Sent is ready.
type Sent struct {
	commands, roundTrips atomic.Int64
}

// Commands returns the commands counted so far.
func (s *Sent) Commands() int64 { return s.commands.Load() }

// RoundTrips returns the round trips counted so far.
func (s *Sent) RoundTrips() int64 { return s.roundTrips.Load() }

// DialHook implements redis.Hook; it counts nothing.
func (s *Sent) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook: one command, one round trip.
func (s *Sent) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "info" {
			s.commands.Add(1)
			s.roundTrips.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook: each command of the
// pipeline, and one round trip.
func (s *Sent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.commands.Add(int64(len(cmds)))
		s.roundTrips.Add(1)
		return next(ctx, cmds)
	}
}
