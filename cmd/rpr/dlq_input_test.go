package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/admin"
)

func TestDlqBadInput(t *testing.T) {
	// Nothing here reaches Redis: the port is closed, so a check that let
	// bad input through would fail with "connect" instead of its message.
	redisURL := "redis://127.0.0.1:1/0"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ls", jobsSvc, "--code", "NOPE"}, `invalid argument "NOPE" for "--code" flag: not a status code; use a name such as UNAVAILABLE`},
		{[]string{"ls", jobsSvc, "--code", "OK"}, "no dead letter failed with OK; use a failure code such as --code UNAVAILABLE"},
		{[]string{"ls", jobsSvc, "--older-than", "-5m"}, `"--older-than" flag: must not be negative; use e.g. --older-than 1h`},
		{[]string{"ls", jobsSvc, "--newer-than", "soon"}, `"--newer-than" flag: not a duration; use e.g. --newer-than 90s, 15m, 2h or 3d`},
		{[]string{"ls", jobsSvc, "--older-than", "2h", "--newer-than", "1h"}, "select nothing: for a window, --older-than must be the shorter, e.g. --older-than 10m --newer-than 2h"},
		{[]string{"ls", jobsSvc, "--limit", "-1"}, `"--limit" flag: want a number of dead letters, 0 for no limit, e.g. --limit 100`},
		{[]string{"ls", jobsSvc, "--limit", "many"}, `"--limit" flag: want a number`},
		{[]string{"ls", jobsSvc, "-o", "yaml"}, `-o "yaml": want table or json, e.g. -o json`},
		{[]string{"ls", jobsSvc, "--bogus"}, "unknown flag: --bogus (see rpr dlq ls --help)"},
		{[]string{"ls", jobsSvc + "/Charge"}, "names a method; name the service and filter by method: " + jobsSvc + " --method Charge"},
		{[]string{"ls"}, "usage: rpr dlq ls SERVICE"},
		{[]string{"show", jobsSvc}, "usage: rpr dlq show SERVICE ID"},
		{[]string{"show", jobsSvc, "nope"}, "neither an entry id (e.g. 1764434400123-0"},
		{[]string{"replay", jobsSvc}, "say which dead letters to replay: pass IDs (from \"rpr dlq ls " + jobsSvc + "\"), a filter (--method, --code, --older-than, --newer-than) or --all"},
		{[]string{"drop", jobsSvc}, "say which dead letters to drop"},
		{[]string{"replay", jobsSvc, "1-1", "--all"}, "pass either IDs or a selection (--all or filters), not both"},
		{[]string{"drop", jobsSvc, "1-1", "--code", "INTERNAL"}, "pass either IDs or a selection"},
		{[]string{"replay", jobsSvc, "1-1", "--limit", "3"}, "--limit applies to --all and filters, not to IDs"},
		{[]string{"replay", jobsSvc, "1-1", "what"}, `"what" is neither an entry id`},
		{[]string{"lss"}, `unknown command "lss" for "rpr dlq": did you mean ls?`},
	} {
		args := append([]string{"dlq"}, tc.args...)
		if len(tc.args) > 1 {
			args = append(args, "--redis", redisURL)
		}
		res := runCLI(t, "", args...)
		if res.code != 2 || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("rpr %s: want exit 2 and %q; got\n%s", strings.Join(tc.args, " "), tc.want, res)
		}
	}
}

func TestDlqConfirm(t *testing.T) {
	for stdin, want := range map[string]bool{"y\n": true, "Y": true, "yes\n": true, " YES \n": true, "n\n": false, "": false, "\n": false, "yep\n": false} {
		var prompt bytes.Buffer
		got, err := confirm(context.Background(), strings.NewReader(stdin), &prompt, "Drop 3 dead letters of x.Y?")
		if err != nil || got != want {
			t.Errorf("answer %q: confirmed %v (%v), want %v", stdin, got, err, want)
		}
		if !strings.HasPrefix(prompt.String(), "Drop 3 dead letters of x.Y? [y/N] ") || !strings.HasSuffix(prompt.String(), "\n") {
			t.Errorf("answer %q: prompt %q", stdin, prompt.String())
		}
	}

	// A pipe nobody writes to or closes does not hang it.
	defer func(d time.Duration) { confirmWait = d }(confirmWait)
	confirmWait = 50 * time.Millisecond
	r, pw := io.Pipe()
	defer pw.Close()
	var prompt bytes.Buffer
	if got, err := confirm(context.Background(), r, &prompt, "Drop?"); got || err != nil || !strings.Contains(prompt.String(), "no answer on stdin") {
		t.Errorf("silent stdin: confirmed %v (%v), prompt %q", got, err, prompt.String())
	}
}

func TestDlqProgress(t *testing.T) {
	var buf bytes.Buffer
	if progress, finish := progressFor(&buf, 5000, "replaying"); progress != nil {
		t.Error("a progress bar on a writer that is not a terminal")
	} else {
		finish()
	}
	progress, finish := startProgressBar(&buf, 300, "replaying")
	for done := 100; done <= 300; done += 100 {
		progress(done)
	}
	finish()
	if !strings.Contains(buf.String(), "replaying") || !strings.Contains(buf.String(), "/300") {
		t.Errorf("bar output %q", buf.String())
	}
}

func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"90s": 90 * time.Second, "15m": 15 * time.Minute, "2h": 2 * time.Hour, "3d": 72 * time.Hour,
		"1d12h": 36 * time.Hour, "0": 0, "-5m": -5 * time.Minute,
	} {
		if got, err := parseAge(in); err != nil || got != want {
			t.Errorf("parseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "xd", "1x", "soon", "1d2"} {
		if got, err := parseAge(in); err == nil {
			t.Errorf("parseAge(%q) = %v; want an error", in, got)
		}
	}
}

func TestDlqReplaySummary(t *testing.T) {
	skipped := map[string]string{}
	for i := range skippedShown + 5 {
		skipped[fmt.Sprintf("1-%02d", i)] = "a unary request: its caller stopped waiting long ago; drop it"
	}
	var out bytes.Buffer
	printReplay(&out, "x.v1.Y", 40, admin.ReplayResult{Replayed: 10, AlreadySucceeded: 3, Gone: 2, Skipped: skipped})
	for _, want := range []string{
		"replayed 10 of 40 dead letters of x.v1.Y\n",
		"  already succeeded   3  dropped: another request with the same idempotency key succeeded since\n",
		"  gone                2  no longer in the DLQ",
		"  skipped            25  cannot be replayed; left in the DLQ\n",
		"    1-00  a unary request: its caller stopped waiting long ago; drop it\n",
		"    1-19  a unary",
		"    … and 5 more (rpr dlq ls x.v1.Y shows them all)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "1-20") {
		t.Errorf("summary lists more than %d skipped letters:\n%s", skippedShown, out.String())
	}
}
