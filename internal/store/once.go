package store

import "github.com/redis/go-redis/v9"

// A write that adds a request (a unary call's XADD, a stream's open, an
// enqueue) must reach Redis at most once, and its failure must say whether
// it did. go-redis resends a command, or a whole pipeline, after a
// failure it deems transient: after a broken connection, which may have
// carried the write to Redis before it broke, the resend adds the request
// a second time (a second execution of a call that is not idempotent),
// and when the resend then fails to connect, the error the caller sees is
// the dial's, which reads as "never sent" although the first attempt ran.
// go-redis skips those resends for a command whose NoRetry is true; the
// wrappers here make it so for rpr's commands.

// AtMostOnce returns cmd as a command go-redis sends at most once: it is
// not resent after a failure, so its error is that of its only attempt.
// The wrapper shares cmd's reply: read it from cmd.
func AtMostOnce(cmd *redis.Cmd) redis.Cmder { return onceCmd{cmd} }

// AtMostOnceString is AtMostOnce for a *redis.StringCmd (an XADD).
func AtMostOnceString(cmd *redis.StringCmd) redis.Cmder { return onceStringCmd{cmd} }

// onceCmd is a *redis.Cmd that go-redis never resends.
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// onceStringCmd is a *redis.StringCmd that go-redis never resends.
type onceStringCmd struct{ *redis.StringCmd }

func (onceStringCmd) NoRetry() bool { return true }
