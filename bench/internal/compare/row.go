package compare

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redisinfo"
)

// Row is one line of bench/perf's table: one figure of one goal of issue
// 18, rpr's value, what it is compared with, and whether it meets its
// target. Every measurement that adds to the table returns []Row.
type Row struct {
	Goal   int    // the goal's number in issue 18
	Figure string // what is measured, its unit and settings
	RPR    float64
	// Baseline is what RPR is compared with (NaN: nothing) and
	// BaselineOf says what it is: "gRPC", "asynq", "issue 18", ...
	Baseline   float64
	BaselineOf string
	Target     Target
	// AsWritten marks a target as issue 18 wrote it, for a goal that
	// bench/perf judges against the plain Streams RPC measured in the
	// same run instead: the row is reported with its target, and the
	// table tallies it apart from the targets the goals are judged by.
	AsWritten bool
}

// Ratio is RPR/Baseline, NaN without a baseline.
func (r Row) Ratio() float64 {
	if math.IsNaN(r.Baseline) || r.Baseline == 0 {
		return math.NaN()
	}
	return r.RPR / r.Baseline
}

// Target is what a figure must be to meet its goal.
type Target struct {
	kind  targetKind
	value float64
}

type targetKind int

const (
	noTarget     targetKind = iota
	atMost                  // RPR ≤ value
	ratioAtMost             // RPR/Baseline ≤ value
	ratioAtLeast            // RPR/Baseline ≥ value
)

// NoTarget is a figure reported for information: the goal sets no bound.
var NoTarget = Target{}

// AtMost is met when rpr's figure is at most v.
func AtMost(v float64) Target { return Target{atMost, v} }

// RatioAtMost is met when rpr's figure over the baseline is at most v.
func RatioAtMost(v float64) Target { return Target{ratioAtMost, v} }

// RatioAtLeast is met when rpr's figure over the baseline is at least v.
func RatioAtLeast(v float64) Target { return Target{ratioAtLeast, v} }

// String is the target as the table shows it.
func (t Target) String() string {
	v := strconv.FormatFloat(t.value, 'f', -1, 64)
	switch t.kind {
	case atMost:
		return "≤ " + v
	case ratioAtMost:
		return "ratio ≤ " + v
	case ratioAtLeast:
		return "ratio ≥ " + v
	}
	return "—"
}

// Met says "yes" or "no" for r against its target, "—" without one.
func (r Row) Met() string {
	var ok bool
	switch r.Target.kind {
	case atMost:
		ok = r.RPR <= r.Target.value
	case ratioAtMost:
		ok = r.Ratio() <= r.Target.value
	case ratioAtLeast:
		ok = r.Ratio() >= r.Target.value
	default:
		return "—"
	}
	if ok {
		return "yes"
	}
	return "no"
}

// Num formats v with about three significant digits ("—" for NaN).
func Num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "—"
	case a >= 100 || v == math.Trunc(v) && a >= 10:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// RedisIdle is one reading of what idle rpr processes cost a Redis.
type RedisIdle struct {
	redisinfo.Sample       // commands, CPU, used_memory
	ConnectedClients int64 // INFO clients connected_clients
}

// ReadRedisIdle samples rdb's commands, memory and connections (two INFO
// commands, neither counted among the commands).
func ReadRedisIdle(ctx context.Context, rdb redis.Cmdable) (RedisIdle, error) {
	s, err := redisinfo.Read(ctx, rdb)
	if err != nil {
		return RedisIdle{}, err
	}
	info, err := rdb.Info(ctx, "clients").Result()
	if err != nil {
		return RedisIdle{}, fmt.Errorf("INFO clients: %w", err)
	}
	n, err := strconv.ParseInt(redisinfo.Field(info, "connected_clients"), 10, 64)
	if err != nil {
		return RedisIdle{}, fmt.Errorf("INFO clients connected_clients: %w", err)
	}
	return RedisIdle{Sample: s, ConnectedClients: n}, nil
}
