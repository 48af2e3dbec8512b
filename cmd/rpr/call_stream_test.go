package main

import (
	"strings"
	"testing"

	"github.com/rprtunnel/rpr/internal/redistest"
)

// TestCallStreams calls the greeter's streaming methods the way a person
// would: a server stream prints one JSON line per reply as it arrives, a
// bidirectional one reads its requests as JSON lines from stdin.
func TestCallStreams(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "stream-worker")
	url := rs.URL()

	run := runCLI(t, "", "call", "--redis", url, "examples.greeter.v1.Greeter/Countdown", `{"from": 3, "intervalMs": 1}`)
	if run.code != 0 || run.stdout != "{\"count\":3}\n{\"count\":2}\n{\"count\":1}\n" {
		t.Fatalf("Countdown:\n%v", run)
	}

	run = runCLI(t, "{\"text\":\"ada\"}\n\n{\"text\":\"bob\"}\n", "call", "--redis", url, "examples.greeter.v1.Greeter/Chat", "-")
	if run.code != 0 || run.stdout != "{\"text\":\"Hello, ada!\"}\n{\"text\":\"Hello, bob!\"}\n" {
		t.Fatalf("Chat:\n%v", run)
	}

	// A bad request line is a usage error that names the line.
	run = runCLI(t, "{\"text\":\"ada\"}\n{\"txt\":\"bob\"}\n", "call", "--redis", url, "examples.greeter.v1.Greeter/Chat")
	if run.code != 2 || !strings.Contains(run.stderr, "request line 2 is not a valid examples.greeter.v1.ChatRequest") {
		t.Fatalf("Chat with a bad line:\n%v", run)
	}

	// The stream's status is the command's outcome.
	run = runCLI(t, "", "call", "--redis", url, "examples.greeter.v1.Greeter/Countdown", `{"from": 5000}`)
	if run.code != 1 || !strings.Contains(run.stderr, "INVALID_ARGUMENT") || !strings.Contains(run.stderr, "more than 1000") {
		t.Fatalf("Countdown from 5000:\n%v", run)
	}
}

// TestListShowsStreamKinds: rpr ls names each streaming method's kind.
func TestListShowsStreamKinds(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "ls-worker")
	out, code := runRPR(t, "ls", "--redis", rs.URL())
	for _, want := range []string{"Countdown  server-streaming", "Chat       bidi-streaming"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("rpr ls lacks %q:\n%s", want, out)
		}
	}
}
