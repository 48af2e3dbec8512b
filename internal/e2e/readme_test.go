package e2e

import (
	"os"
	"strings"
	"testing"
)

// readmeBlock is one fenced code block of the README after a marker.
type readmeBlock struct {
	marker string // "install", "file server/main.go", ...
	line   int    // the line of the marker
	body   string
}

// readmeBlocks returns the blocks of README.md after <!-- ownmodule:... -->
// markers. A marker must stand alone on its line, and the next non-blank
// line must open a fenced block.
func readmeBlocks(t *testing.T, path string) map[string]readmeBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	blocks := map[string]readmeBlock{}
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		marker, ok := strings.CutPrefix(line, "<!-- ownmodule:")
		if !ok {
			continue
		}
		marker, ok = strings.CutSuffix(marker, " -->")
		if !ok {
			t.Fatalf("README.md:%d: a marker is <!-- ownmodule:NAME --> alone on its line, not %q", i+1, line)
		}
		at := i + 1
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j == len(lines) || !strings.HasPrefix(lines[j], "```") {
			t.Fatalf("README.md:%d: marker %q is not followed by a fenced code block", at, marker)
		}
		var body strings.Builder
		for j++; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
			body.WriteString(lines[j])
			body.WriteByte('\n')
		}
		if j == len(lines) {
			t.Fatalf("README.md:%d: the code block after marker %q is not closed", at, marker)
		}
		if prev, dup := blocks[marker]; dup {
			t.Fatalf("README.md:%d: marker %q again (first at line %d)", at, marker, prev.line)
		}
		blocks[marker] = readmeBlock{marker: marker, line: at, body: body.String()}
		i = j
	}
	return blocks
}

// commandLines returns the commands of a shell block: its lines without
// comments and blank lines.
func commandLines(body string) []string {
	var lines []string
	for _, line := range strings.Split(body, "\n") {
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}
