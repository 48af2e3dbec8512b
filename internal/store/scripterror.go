package store

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ScriptError is an error Redis raised while running one of rpr's
// scripts, read back without Lua's internals (the script's SHA and line)
// and with what it means for rpr. It unwraps to Redis's own error.
type ScriptError struct {
	Script string // the script's name, e.g. "arbiter"
	Code   string // Redis's error code: NOGROUP, OOM, WRONGTYPE, ...
	Text   string // Redis's message after the code
	// Started: Redis raised the error while running the script, whose
	// writes until then stay. False when Redis refused to run it at all
	// (READONLY, LOADING, BUSY...) or refused its first write (OOM):
	// then it did nothing.
	Started bool
	err     error
}

func (e *ScriptError) Error() string {
	msg := fmt.Sprintf("Redis refused rpr's %s script: %s %s", e.Script, e.Code, e.Text)
	if hint := scriptErrorHints[e.Code]; hint != "" {
		msg += " (" + hint + ")"
	}
	return msg
}

func (e *ScriptError) Unwrap() error { return e.err }

// scriptErrorHints says what each error Redis can raise in a script means
// for rpr, and what to do.
var scriptErrorHints = map[string]string{
	"NOGROUP":    "a stream or its consumer group is missing: Redis lost data (a restart without persistence, FLUSHALL, or a failover to a replica that had not caught up); a running server of the service recreates them within seconds",
	"WRONGTYPE":  "a key under rpr's prefix holds another kind of value: something other than rpr writes under this prefix; give rpr a prefix of its own (ClientOptions.Prefix, ServerOptions.Prefix, --prefix) or delete the key",
	"OOM":        "Redis is at its maxmemory and refuses writes: raise maxmemory, or drain the queues (rpr stats shows the backlogs)",
	"READONLY":   "the connection reached a replica: point rpr at the master, or use a Sentinel or Cluster URL",
	"BUSY":       "Redis is busy running another script",
	"MASTERDOWN": "the replica lost its master",
	"ERR":        "an internal error of rpr's script: please report it with this message",
}

// luaLocation is what Redis appends to an error raised in a script: the
// script's SHA and the line.
var luaLocation = regexp.MustCompile(`\s*script: [0-9a-f]{40}, on @user_script:\d+\.?$`)

// luaLine is how a Lua runtime error names the line it happened on.
var luaLine = regexp.MustCompile(`^user_script:\d+: `)

// newScriptError returns err, from a run of script name, as a
// *ScriptError when Redis raised it inside the script, and otherwise
// (a connection error, a timeout) wrapped with the script's name.
func newScriptError(name string, err error) error {
	var rerr redis.Error
	if !errors.As(err, &rerr) || errors.Is(err, redis.Nil) {
		return fmt.Errorf("script %s: %w", name, err)
	}
	msg := luaLocation.ReplaceAllString(rerr.Error(), "")
	code, text, _ := strings.Cut(msg, " ")
	if strings.ToUpper(code) != code || code == "" {
		code, text = "ERR", msg
	}
	// Raised inside the script, unless it is OOM: Redis checks memory at
	// a script's first write, so an OOM means it wrote nothing.
	started := (luaLocation.MatchString(rerr.Error()) || strings.Contains(rerr.Error(), "user_script:")) && code != "OOM"
	return &ScriptError{Script: name, Code: code, Text: luaLine.ReplaceAllString(text, ""), Started: started, err: err}
}
