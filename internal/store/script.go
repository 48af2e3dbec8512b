package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// MaxStateTTL is the longest a script keeps a request's state: a request
// whose deadline lies further ahead (a caller's out-of-range value) has
// its state kept this long, so that the expiry Redis is asked for is
// always one it accepts and never fails the other entries of the batch.
const MaxStateTTL = 100 * 365 * 24 * time.Hour

// prelude is the Lua every script starts with: the helpers several scripts
// share, so that each is written once. Redis compiles a script once per
// SHA, so the prelude costs nothing per call but defining a few locals.
var prelude = `
-- max_ttl_ms is MaxStateTTL: no state is kept longer.
local max_ttl_ms = ` + itoa(MaxStateTTL.Milliseconds()) + `
-- state_ttl is how long a state whose deadline is deadline (Redis ms) is
-- kept from now, margin included: never past max_ttl_ms, so that the
-- number is one PEXPIRE accepts (Lua prints larger ones in exponent form).
local function state_ttl(deadline, now, margin)
  return math.min(math.max(deadline - now, 0), max_ttl_ms) + margin
end
-- wrong_type reports whether r, what a redis.pcall on a key named by one
-- entry returned, is Redis's WRONGTYPE: that key holds another kind of
-- value, which must fail that entry alone. Any other error concerns the
-- whole call (OOM, READONLY, ...) and is raised again.
local function wrong_type(r)
  if type(r) ~= 'table' or not r.err then return false end
  if string.sub(r.err, 1, 9) == 'WRONGTYPE' then return true end
  return error(r)
end
-- now_ms and now_us read Redis's own clock (TIME): host clocks never decide.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- retire_entries acknowledges the request entries ids of stream for group
-- and deletes them, all at once: a script calls it in the same run that
-- writes what finished them, so no entry is gone without its outcome.
local function retire_entries(stream, group, ids)
  if #ids > 0 then
    redis.call('XACK', stream, group, unpack(ids))
    redis.call('XDEL', stream, unpack(ids))
  end
end
-- beat_ms returns the time of a worker's last heartbeat from its record in
-- a workers hash (JSON, see wire.Worker), nil when the record is absent or
-- unreadable.
local function beat_ms(raw)
  if not raw then return nil end
  local ok, w = pcall(cjson.decode, raw)
  if not ok or type(w) ~= 'table' or type(w['beat_ms']) ~= 'number' then return nil end
  return w['beat_ms']
end
`

// script is one Lua script of rpr's, prelude included.
type script struct {
	name string
	lua  *redis.Script
	// oom is the script's flagged form (oomShebang first), which Redis 7
	// runs when it is at its maxmemory; nil for a script that must be
	// refused there (see Dialect).
	oom *redis.Script
	// src and oomSrc are lua's and oom's text, which Recover sends with
	// EVAL (redis.Script does not give its text back).
	src, oomSrc string
}

// oomShebang is the first line of a script's flagged form: Redis 7 runs
// such a script, writes included, when it is over its maxmemory, where it
// refuses a script without flags at its first write that may add memory.
// A flagged script must name every key it touches in KEYS (rpr's do).
const oomShebang = "#!lua flags=allow-oom\n"

// scripts lists every script, for LoadScripts.
var scripts []*script

// newScript registers the script called name with body (after the
// prelude). Redis refuses it at its maxmemory like any write: the scripts
// that add new data (a request, a limiter's counters) are these.
func newScript(name, body string) *script {
	s := &script{name: name, lua: redis.NewScript(prelude + body), src: prelude + body}
	scripts = append(scripts, s)
	return s
}

// newOOMScript registers the script called name with body, like
// newScript, with a flagged form too: the scripts that keep a service
// live and let a backlog drain (heartbeats, claims, completions, lease
// extensions, the janitor, the retry mover, dead-lettering) run on Redis 7
// when Redis is at its maxmemory, since running them is what frees memory
// there (a completion deletes its request's entry).
func newOOMScript(name, body string) *script {
	s := newScript(name, body)
	s.oomSrc = oomShebang + prelude + body
	s.oom = redis.NewScript(s.oomSrc)
	return s
}

// Dialect is the form of rpr's scripts a Redis deployment runs, as
// LoadScripts found it: DialectFlags on Redis 7 and later, which reads a
// script's flags from its first line, so that the scripts registered with
// newOOMScript keep working when Redis is at its maxmemory (with
// maxmemory-policy noeviction); DialectPlain on Redis 6.2, where every
// script runs in its plain form and Redis at its maxmemory refuses them
// all at their first write, heartbeats and claims included. The zero value
// is DialectPlain, which every Redis runs.
type Dialect uint8

// The dialects (see Dialect).
const (
	DialectPlain Dialect = iota
	DialectFlags
)

// String names the dialect for logs.
func (d Dialect) String() string {
	if d == DialectFlags {
		return "flags (Redis 7+)"
	}
	return "plain (no script flags: Redis 6.2)"
}

// LoadScripts loads every script into Redis's script cache, so that the
// first calls need not fall back to EVAL, and reports the dialect the
// deployment runs: DialectFlags when it accepts the scripts' flagged forms
// (Redis 7), DialectPlain when it cannot compile them (Redis 6.2).
func LoadScripts(ctx context.Context, c redis.Scripter) (Dialect, error) {
	for _, s := range scripts {
		if err := s.lua.Load(ctx, c).Err(); err != nil {
			return DialectPlain, fmt.Errorf("load Lua script %s: %w", s.name, err)
		}
	}
	for _, s := range scripts {
		if s.oom == nil {
			continue
		}
		err := s.oom.Load(ctx, c).Err()
		if isCompileError(err) {
			return DialectPlain, nil
		}
		if err != nil {
			return DialectPlain, fmt.Errorf("load Lua script %s (flagged form): %w", s.name, err)
		}
	}
	return DialectFlags, nil
}

// isCompileError reports Redis's answer to a script it cannot compile:
// what Redis 6.2 answers to a script whose first line is a shebang.
func isCompileError(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Error compiling script")
}

// Call is one run of a script: the keys and arguments its typed builder
// assembled and, once run, its reply. Typed builders embed it and read
// the reply with a Result method of their own.
type Call struct {
	script *script
	keys   []string
	args   []any
	// refs holds the call's string and bytes arguments that args refer to
	// (see ref), and its keys after the first (see Queue): sized for all
	// of them by the call's constructor, so that it never grows (an
	// append that moves it leaves the earlier references in a copy).
	refs []BytesArg
	// argv is the command Queue built last, whose array the next Queue
	// of a reused call (Answer.Start) builds in.
	argv []any
	cmd  *redis.Cmd
	// flagged: Queue and Recover send the script's flagged form (Use).
	flagged bool
	// once: the call must reach Redis at most once (see AtMostOnce).
	once bool
}

// BytesArg is a string or bytes argument of a command, which go-redis
// writes as it is (encoding.BinaryMarshaler). A *BytesArg into memory the
// command's owner already holds boxes without an allocation, where a
// string or []byte boxed as it is costs one every time (for a batch of
// answers, two per request).
type BytesArg []byte

func (r *BytesArg) MarshalBinary() ([]byte, error) { return *r, nil }

// String is what a hook that prints commands (cmd.String) shows: a short
// argument as text, a long one as its size.
func (r *BytesArg) String() string {
	if len(*r) > 64 {
		return fmt.Sprintf("<%d bytes>", len(*r))
	}
	return string(*r)
}

// ref returns b as an argument for args that refers to it (see BytesArg).
// A reference made before refs grew points into its previous array,
// which keeps its value.
func (c *Call) ref(b []byte) *BytesArg {
	c.refs = append(c.refs, b)
	return &c.refs[len(c.refs)-1]
}

// refString is ref for a string, whose bytes are read in place.
func (c *Call) refString(s string) *BytesArg {
	return c.ref(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// Use makes the call run in the form dialect d runs: with DialectFlags a
// script registered to keep working at maxmemory sends its flagged form;
// any other call is unchanged. Servers use it on every call they make;
// without it a call sends its plain form.
func (c *Call) Use(d Dialect) {
	c.flagged = d == DialectFlags && c.script.oom != nil
}

// form returns the script the call sends.
func (c *Call) form() *redis.Script {
	if c.flagged {
		return c.script.oom
	}
	return c.script.lua
}

// formSrc returns the text of the script the call sends.
func (c *Call) formSrc() string {
	if c.flagged {
		return c.script.oomSrc
	}
	return c.script.src
}

// Commander sends a command built by hand: a client, or a pipeline.
type Commander interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Runner is what Run sends calls through: a client, which makes pipelines
// for several and sends a recovered call's EVAL.
type Runner interface {
	Commander
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// Queue sends the call with EVALSHA through p: a pipeline, or a client
// for a call on its own.
//
// The command is built here rather than by go-redis's EvalSha, which
// boxes every key anew: a batch of answers names each caller's response
// stream, so that was one allocation per answer. The first key stays a
// string, which is what a Cluster client routes by (the keys of one call
// share a hash tag); the others are references into the call (BytesArg).
func (c *Call) Queue(ctx context.Context, p Commander) redis.Cmder {
	argv := append(reuse(c.argv, 3+len(c.keys)+len(c.args)), "evalsha", c.form().Hash(), len(c.keys))
	for i, key := range c.keys {
		if i == 0 {
			argv = append(argv, key)
		} else {
			argv = append(argv, c.refString(key))
		}
	}
	c.argv = append(argv, c.args...)
	c.cmd = redis.NewCmd(ctx, c.argv...)
	c.process(ctx, p)
	return c.cmd
}

// process sends c.cmd through p, as a command go-redis never resends when
// the call must reach Redis at most once.
func (c *Call) process(ctx context.Context, p Commander) {
	if len(c.keys) > 0 {
		c.cmd.SetFirstKeyPos(3)
	}
	if c.once {
		_ = p.Process(ctx, AtMostOnce(c.cmd)) // the error is the command's
		return
	}
	_ = p.Process(ctx, c.cmd) // the error is the command's
}

// Recover runs the call again with EVAL, which also loads the script,
// when its EVALSHA found the script missing (NOSCRIPT: Redis restarted or
// failed over since the scripts were loaded). Every call is recovered
// here and nowhere else. A flagged form Redis cannot compile (it was
// replaced by a Redis 6.2) runs again in its plain form.
func (c *Call) Recover(ctx context.Context, rdb Commander) {
	if c.cmd == nil || !isNoScript(c.cmd.Err()) {
		return
	}
	c.eval(ctx, rdb)
	if c.flagged && isCompileError(c.cmd.Err()) {
		c.flagged = false
		c.eval(ctx, rdb)
	}
}

// eval runs the call again with EVAL and the script's text: the
// arguments of its last run, but for the first two.
func (c *Call) eval(ctx context.Context, rdb Commander) {
	argv := slices.Clone(c.cmd.Args())
	argv[0], argv[1] = "eval", c.formSrc()
	c.cmd = redis.NewCmd(ctx, argv...)
	c.process(ctx, rdb)
}

// Err returns the error of the call's run, if any, naming the script; an
// error Redis raised inside the script is a *ScriptError.
func (c *Call) Err() error {
	if c.cmd == nil {
		return fmt.Errorf("script %s was not run", c.script.name)
	}
	if err := c.cmd.Err(); err != nil {
		return newScriptError(c.script.name, err)
	}
	return nil
}

// reply returns the call's reply, or its error (see Err).
func (c *Call) reply() (any, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	return c.cmd.Val(), nil
}

// ints returns the reply as integers, checking that there are n of them
// (n < 0: any number).
func (c *Call) ints(n int) ([]int64, error) {
	if _, err := c.reply(); err != nil {
		return nil, err
	}
	out, err := c.cmd.Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("script %s: %w", c.script.name, err)
	}
	if n >= 0 && len(out) != n {
		return nil, fmt.Errorf("script %s answered %d values, want %d", c.script.name, len(out), n)
	}
	return out, nil
}

// strings returns the reply as strings, checking that there are n of them
// (n < 0: any number).
func (c *Call) strings(n int) ([]string, error) {
	if _, err := c.reply(); err != nil {
		return nil, err
	}
	out, err := c.cmd.StringSlice()
	if err != nil {
		return nil, fmt.Errorf("script %s: %w", c.script.name, err)
	}
	if n >= 0 && len(out) != n {
		return nil, fmt.Errorf("script %s answered %d values, want %d", c.script.name, len(out), n)
	}
	return out, nil
}

// Run runs calls, in one pipeline when there are several, and recovers
// those that found their script missing. Each call carries its own
// outcome (its Result method, or Err).
func Run(ctx context.Context, rdb Runner, calls ...*Call) {
	switch len(calls) {
	case 0:
		return
	case 1:
		calls[0].Queue(ctx, rdb)
	default:
		pipe := rdb.Pipeline()
		for _, c := range calls {
			c.Queue(ctx, pipe)
		}
		_, _ = pipe.Exec(ctx) // each call carries its own error
	}
	for _, c := range calls {
		c.Recover(ctx, rdb)
	}
}

// isNoScript reports Redis's answer to an EVALSHA of a script it does not
// have.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// itoa formats n in decimal.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }
