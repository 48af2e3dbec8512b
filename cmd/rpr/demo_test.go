package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/rprtunnel/rpr/internal/redistest"
)

// TestDemoShowsTheThreeOutcomes runs `rpr demo` against a real Redis, the
// way the README's first command does (there with the embedded one).
func TestDemoShowsTheThreeOutcomes(t *testing.T) {
	rs := redistest.Start(t)
	for name, url := range map[string]string{"real redis": rs.URL(), "embedded": ""} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			// Twice on one Redis: the second run must not trip over the
			// first one's orders (idempotency keys are remembered).
			for range 2 {
				out.Reset()
				if err := runDemo(context.Background(), &out, url, false); err != nil {
					t.Fatalf("demo: %v\n%s", err, out.String())
				}
			}
			for _, want := range []string{
				`-> OK "Hello, Ada!"`,
				"-> INVALID_ARGUMENT: name is empty",
				"-> DEADLINE_EXCEEDED:",
				"-> OK 3 2 1, then the end of the stream",
				"the server shipped ord-",
				"it waits in the dead-letter queue: INVALID_ARGUMENT: permanent error",
			} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("demo output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"demo", "--help"}, {"exporter", "--help"}} {
		root := newRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil || !strings.Contains(out.String(), "Usage:") {
			t.Errorf("rpr %v: %v\n%s", args, err, out.String())
		}
	}
}
