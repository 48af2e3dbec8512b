package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/rprtunnel/rpr/internal/redistest"
)

func TestLs(t *testing.T) {
	rs := redistest.Start(t)

	res := runCLI(t, "", "ls", "--redis", rs.URL())
	if res.code != 0 || !strings.Contains(res.stdout, "no services") {
		t.Fatalf("empty Redis: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}

	startGreeter(t, rs, "greeter-ls-1")
	res = runCLI(t, "", "ls", "--redis", rs.URL())
	if res.code != 0 {
		t.Fatalf("ls: exit %d, stderr %q", res.code, res.stderr)
	}
	out := res.stdout
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^examples\.greeter\.v1\.Greeter  serving, 1 live worker$`),
		regexp.MustCompile(`(?m)^  METHOD +FLAGS +TIMEOUT +SERVED BY +REQUEST -> RESPONSE$`),
		regexp.MustCompile(`(?m)^  SayHello +- +5s +all +examples\.greeter\.v1\.SayHelloRequest -> examples\.greeter\.v1\.SayHelloResponse$`),
		regexp.MustCompile(`(?m)^  SlowHello +- +10s +all +examples\.greeter\.v1\.SlowHelloRequest -> examples\.greeter\.v1\.SlowHelloResponse$`),
		regexp.MustCompile(`(?m)^  WORKER +STATE +HOST +PID +LANE +SHARDS +SCHEMA +METHODS +LAST BEAT$`),
		regexp.MustCompile(`(?m)^  greeter-ls-1 +live +\S+ +\d+ +default +- +[0-9a-f]{16} +all +[0-9.]+m?s ago$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("ls output lacks %s:\n%s", want, out)
		}
	}

	// A prefix with no services.
	res = runCLI(t, "", "ls", "--redis", rs.URL(), "--prefix", "other:")
	if res.code != 0 || !strings.Contains(res.stdout, `no services under prefix "other:"`) {
		t.Errorf("other prefix: exit %d, stdout %q", res.code, res.stdout)
	}

	res = runCLI(t, "", "ls", "--redis", "redis://127.0.0.1:1/0")
	if res.code != 2 {
		t.Errorf("unreachable Redis: exit %d, stderr %q; want 2", res.code, res.stderr)
	}
}

func TestLsServiceWithoutSchema(t *testing.T) {
	rs := redistest.Start(t)
	// Heartbeats of a server that does not publish its schema.
	if err := rs.Client(t).HSet(t.Context(), "rpr:v1:{old.v1.Legacy}:workers", "w1", `{"host":"h","pid":1,"started_ms":1,"beat_ms":1}`).Err(); err != nil {
		t.Fatal(err)
	}
	res := runCLI(t, "", "ls", "--redis", rs.URL())
	for _, want := range []string{"old.v1.Legacy  NOT SERVING", "no schema published", "w1", "silent"} {
		if res.code != 0 || !strings.Contains(res.stdout, want) {
			t.Errorf("exit %d, stdout %q; want %q", res.code, res.stdout, want)
		}
	}
}
