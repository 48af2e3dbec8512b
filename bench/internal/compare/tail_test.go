package compare

import (
	"strings"
	"testing"
)

// TestTailKeepsHeadAndEnd: a child's stderr is kept by its first and last
// bytes, so that a panic's message (first) and the last goroutine's trace
// (last) both survive traces too long to keep.
func TestTailKeepsHeadAndEnd(t *testing.T) {
	tl := &tail{max: 64}
	if got := tl.String(); got != "(no stderr)" {
		t.Fatalf("empty: %q", got)
	}
	tl.Write([]byte("panic: boom\n"))
	for range 100 {
		tl.Write([]byte("goroutine trace line\n"))
	}
	tl.Write([]byte("exit status 2"))
	got := tl.String()
	if !strings.HasPrefix(got, "panic: boom") || !strings.HasSuffix(got, "exit status 2") || !strings.Contains(got, "[…]") || len(got) > 64+len("\n[…]\n") {
		t.Fatalf("kept %q; want the panic first, [...] and the exit last, at most 64 bytes of them", got)
	}
	short := &tail{max: 64}
	short.Write([]byte("only this"))
	if got := short.String(); got != "only this" {
		t.Fatalf("short stderr: %q", got)
	}
}
