package main

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/internal/redistest"
)

// exitCase is how the exit-status table runs one command.
type exitCase struct {
	// args are arguments the command accepts, naming greeterService
	// where it takes a service.
	args []string
	// bad are arguments it refuses as usage errors.
	bad []string
	// unknown are args naming the unknown service acme.v1.Nope instead;
	// nil for a command that takes no service.
	unknown []string
	// settingAhead: the command records a setting for a service that has
	// not started yet, so an unknown name is a note, not a failure.
	settingAhead bool
	// noRedis: the command reads no Redis (help, completion, version).
	noRedis bool
	// redisLogger: the command installs go-redis's logger, which is
	// process-wide, so it does not run beside the others.
	redisLogger bool
}

const (
	unknownSvc = "acme.v1.Nope"
	// unreachableURL refuses connections; max_retries=-1 makes go-redis
	// give up at the first refusal instead of retrying for 1.7s, which
	// the exit status does not depend on.
	unreachableURL = "redis://127.0.0.1:1/0?max_retries=-1"
)

// exitCases has a row for every command rpr has: TestExitStatusTable
// fails for a command without one, so no command escapes the rule.
var exitCases = map[string]exitCase{
	"acl caller":            {args: []string{greeterService}, bad: []string{}, noRedis: true},
	"acl operator":          {bad: []string{greeterService}, noRedis: true},
	"acl server":            {args: []string{greeterService}, bad: []string{}, noRedis: true},
	"bench":                 {bad: []string{"extra", "words"}, unknown: []string{unknownSvc + "/Run"}},
	"call":                  {args: []string{greeterService + "/SayHello", "{}"}, bad: []string{}, unknown: []string{unknownSvc + "/SayHello", "{}"}},
	"completion bash":       {bad: []string{"x"}, noRedis: true},
	"completion fish":       {bad: []string{"x"}, noRedis: true},
	"completion powershell": {bad: []string{"x"}, noRedis: true},
	"completion zsh":        {bad: []string{"x"}, noRedis: true},
	"demo":                  {bad: []string{"x"}},
	"describe":              {args: []string{greeterService}, bad: []string{}, unknown: []string{unknownSvc}},
	"dlq drop":              {args: []string{greeterService, "--all", "-y"}, bad: []string{}, unknown: []string{unknownSvc, "--all", "-y"}},
	"dlq ls":                {args: []string{greeterService}, bad: []string{}, unknown: []string{unknownSvc}},
	"dlq replay":            {args: []string{greeterService, "--all"}, bad: []string{}, unknown: []string{unknownSvc, "--all"}},
	"dlq show":              {args: []string{greeterService, "1764434400123-0"}, bad: []string{greeterService}, unknown: []string{unknownSvc, "1764434400123-0"}},
	"egress":                {bad: []string{"x"}, redisLogger: true},
	"exporter":              {args: []string{"--listen", "127.0.0.1:0"}, bad: []string{"x"}},
	"forget":                {args: []string{greeterService}, bad: []string{}, unknown: []string{unknownSvc}},
	"health":                {args: []string{greeterService}, bad: []string{}, unknown: []string{unknownSvc}},
	"help":                  {bad: []string{"nosuch"}, noRedis: true},
	"keys new":              {args: []string{"billing"}, bad: []string{"bad/name"}, noRedis: true},
	"ingress":               {args: []string{"--listen", "127.0.0.1:0"}, bad: []string{"x"}, redisLogger: true},
	"limits ls":             {args: []string{greeterService}, bad: []string{}, unknown: []string{unknownSvc}},
	"limits rm":             {args: []string{greeterService, "free"}, bad: []string{greeterService}, unknown: []string{unknownSvc, "free"}},
	"limits set":            {args: []string{greeterService, "free", "--limit", "1", "--window", "1s"}, bad: []string{greeterService, "--limit", "1", "--window", "1s"}, unknown: []string{unknownSvc, "free", "--limit", "1", "--window", "1s"}, settingAhead: true},
	"ls":                    {bad: []string{"not:a:name"}, unknown: []string{unknownSvc}},
	"routes drain":          {args: []string{greeterService, "v2"}, bad: []string{greeterService}, unknown: []string{unknownSvc, "v2"}},
	"routes ls":             {args: []string{greeterService}, bad: []string{}, unknown: []string{unknownSvc}},
	"routes rm":             {args: []string{greeterService + "/*"}, bad: []string{}, unknown: []string{unknownSvc + "/*"}},
	"routes set":            {args: []string{greeterService + "/*", "v1"}, bad: []string{greeterService + "/*"}, unknown: []string{unknownSvc + "/*", "v1"}, settingAhead: true},
	"routes test":           {args: []string{greeterService + "/SayHello"}, bad: []string{}, unknown: []string{unknownSvc + "/SayHello"}},
	"shards get":            {args: []string{greeterService}, bad: []string{}, unknown: []string{unknownSvc}},
	"shards set":            {args: []string{greeterService, "2"}, bad: []string{greeterService}, unknown: []string{unknownSvc, "2"}, settingAhead: true},
	"stats":                 {args: []string{"--interval", "10ms", greeterService}, bad: []string{"not:a:name"}, unknown: []string{"--interval", "10ms", unknownSvc}},
	"top":                   {args: []string{greeterService}, bad: []string{"not:a:name"}, unknown: []string{unknownSvc}},
	"trace":                 {args: []string{"20251129-ORD1-1764434400123-K7P2QXM4RT"}, bad: []string{}},
	"upstreams ls":          {bad: []string{"x"}},
	"upstreams rm":          {args: []string{"orders"}, bad: []string{}},
	"upstreams set":         {args: []string{"orders", "--upstream", "http://127.0.0.1:1"}, bad: []string{}},
	"version":               {bad: []string{"x"}, noRedis: true},
}

// leafCommands lists every command of rpr a user runs, by path without
// "rpr ": the runnable commands of the whole tree, cobra's help and
// completion commands included.
func leafCommands() []string {
	root := newRootCommand()
	root.InitDefaultHelpCmd()
	var out []string
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		if c != root && !c.HasSubCommands() {
			out = append(out, strings.TrimPrefix(c.CommandPath(), "rpr "))
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	slices.Sort(out)
	return out
}

// TestExitStatusTable holds every command to the one rule: 0 done, 1 the
// operation failed, 2 usage or connection error. An unknown flag, bad
// arguments and an unreachable Redis are 2; an unknown service is 1, in
// the words every command shares.
func TestExitStatusTable(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "exit-table")
	unknownMsg := "unknown service " + unknownSvc + "; known: " + greeterService + " (rpr ls lists them)"

	for _, path := range leafCommands() {
		tc, ok := exitCases[path]
		if !ok {
			t.Errorf("rpr %s has no row in exitCases: add one so that its exit statuses are tested", path)
			continue
		}
		words := strings.Fields(path)
		t.Run(strings.ReplaceAll(path, " ", "_"), func(t *testing.T) {
			if !tc.settingAhead && !tc.redisLogger {
				// These only read, and run together once the others
				// (a setting written and taken back, a process-wide
				// logger) have run.
				t.Parallel()
			}
			run := func(args ...string) rprRun {
				return runCLI(t, "", append(slices.Clone(words), args...)...)
			}
			if res := run(append(slices.Clone(tc.args), "--bogus")...); res.code != 2 || !strings.Contains(res.stderr, "unknown flag: --bogus") {
				t.Errorf("unknown flag: want exit 2 naming it; %v", res)
			}
			if res := run(tc.bad...); res.code != 2 || !strings.HasPrefix(res.stderr, "rpr: ") {
				t.Errorf("bad arguments %q: want exit 2 and an rpr: line; %v", tc.bad, res)
			}
			if tc.noRedis {
				return
			}
			if res := run(append(slices.Clone(tc.args), "--redis", unreachableURL)...); res.code != 2 || !strings.Contains(res.stderr, "127.0.0.1:1") {
				t.Errorf("unreachable Redis: want exit 2 naming it; %v", res)
			}
			if tc.unknown == nil {
				return
			}
			res := run(append(slices.Clone(tc.unknown), "--redis", rs.URL())...)
			want := 1
			if tc.settingAhead {
				want = 0
			}
			if res.code != want || !strings.Contains(res.stdout+res.stderr, unknownMsg) {
				t.Errorf("unknown service: want exit %d and %q; %v", want, unknownMsg, res)
			}
			if tc.settingAhead {
				// Take the setting back: the service stays unknown.
				rdb := rs.Client(t)
				keys, err := rdb.Keys(t.Context(), "*"+unknownSvc+"*").Result()
				if err == nil && len(keys) > 0 {
					err = rdb.Del(t.Context(), keys...).Err()
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestUnknownServiceWhereNoneIsKnown: with no service under the prefix,
// the error says where rpr looked instead of listing services.
func TestUnknownServiceWhereNoneIsKnown(t *testing.T) {
	rs := redistest.Start(t)
	res := runCLI(t, "", "describe", "--redis", rs.URL(), unknownSvc)
	if res.code != 1 || !strings.Contains(res.stderr, "unknown service "+unknownSvc+"; no service is known under prefix \"rpr:v1:\" at "+rs.URL()) {
		t.Errorf("want exit 1 naming the prefix and the Redis; %v", res)
	}
}

// camelKey matches a JSON key in camelCase (requestId), which rpr's
// documents never use: their keys are snake_case.
var camelKey = regexp.MustCompile(`[a-z0-9][A-Z]`)

// jsonKeys calls f with every object key in v, at any depth.
func jsonKeys(v any, f func(string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			f(k)
			jsonKeys(e, f)
		}
	case []any:
		for _, e := range v {
			jsonKeys(e, f)
		}
	}
}

// TestOutputJSONEverywhere runs every command that reads with -o json and
// checks that it prints one valid JSON document whose keys are all
// snake_case.
func TestOutputJSONEverywhere(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "json-worker")
	url := rs.URL()
	if res := runCLI(t, "", "limits", "set", "--redis", url, greeterService, "free", "--limit", "10", "--window", "1s"); res.code != 0 {
		t.Fatalf("limits set: %v", res)
	}
	if res := runCLI(t, "", "routes", "set", "--redis", url, greeterService+"/*", "default"); res.code != 0 {
		t.Fatalf("routes set: %v", res)
	}
	for _, args := range [][]string{
		{"ls"},
		{"ls", greeterService},
		{"stats", "--interval", "10ms"},
		{"describe", greeterService},
		{"describe", greeterService + "/SayHello"},
		{"health", greeterService},
		{"limits", "ls", greeterService},
		{"routes", "ls", greeterService},
		{"dlq", "ls", greeterService},
		{"shards", "get", greeterService},
		{"upstreams", "ls"},
	} {
		res := runCLI(t, "", append(args, "--redis", url, "-o", "json")...)
		if res.code != 0 {
			t.Errorf("rpr %s -o json: %v", strings.Join(args, " "), res)
			continue
		}
		var doc any
		if err := json.Unmarshal([]byte(res.stdout), &doc); err != nil {
			t.Errorf("rpr %s -o json: not JSON (%v): %s", strings.Join(args, " "), err, res.stdout)
			continue
		}
		jsonKeys(doc, func(k string) {
			if camelKey.MatchString(k) {
				t.Errorf("rpr %s -o json: key %q is not snake_case", strings.Join(args, " "), k)
			}
		})
	}
}

// TestRedisURLFromEnvironment: $RPR_REDIS_URL and $RPR_PREFIX are the
// defaults of --redis and --prefix.
func TestRedisURLFromEnvironment(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "env-worker")
	t.Setenv(envRedisURL, rs.URL())
	res := runCLI(t, "", "ls", greeterService)
	if res.code != 0 || !strings.Contains(res.stdout, greeterService+"  serving") {
		t.Errorf("ls with $%s: %v", envRedisURL, res)
	}
	if res := runCLI(t, "", "ls", "--help"); !strings.Contains(res.stdout, "$"+envRedisURL) || !strings.Contains(res.stdout, "$"+envPrefix) {
		t.Errorf("ls --help does not name $%s and $%s: %s", envRedisURL, envPrefix, res.stdout)
	}
	t.Setenv(envPrefix, "other:")
	if res := runCLI(t, "", "ls"); res.code != 0 || !strings.Contains(res.stdout, `no services under prefix "other:"`) {
		t.Errorf("ls with $%s: %v", envPrefix, res)
	}
	// The help shows the default with its password masked.
	t.Setenv(envRedisURL, "redis://:s3cret@10.0.0.5:6379/2")
	if res := runCLI(t, "", "stats", "--help"); strings.Contains(res.stdout, "s3cret") || !strings.Contains(res.stdout, `(default "redis://:****@10.0.0.5:6379/2")`) {
		t.Errorf("stats --help with a password in $%s:\n%s", envRedisURL, res.stdout)
	}
	// demo and bench use it too, and their embedded Redis without it.
	for _, env := range []string{rs.URL(), ""} {
		t.Setenv(envRedisURL, env)
		for _, name := range []string{"demo", "bench"} {
			c, _, err := newRootCommand().Find([]string{name})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Flags().Lookup("redis").Value.String(); got != env {
				t.Errorf("rpr %s --redis defaults to %q with $%s=%q", name, got, envRedisURL, env)
			}
		}
	}
	// --redis wins over the environment.
	t.Setenv(envRedisURL, unreachableURL)
	if res := runCLI(t, "", "health", "--redis", rs.URL(), "--prefix", "rpr:v1:", greeterService); res.code != 0 {
		t.Errorf("--redis over $%s: %v", envRedisURL, res)
	}
}

// heartbeat records a silent worker of service, so that Redis knows the
// service (rpr ls lists it) without a server running.
func heartbeat(t *testing.T, rs *redistest.Server, service string) {
	t.Helper()
	if err := rs.Client(t).HSet(t.Context(), "rpr:v1:{"+service+"}:workers", "w1", `{"host":"h","pid":1,"started_ms":1,"beat_ms":1}`).Err(); err != nil {
		t.Fatal(err)
	}
}
