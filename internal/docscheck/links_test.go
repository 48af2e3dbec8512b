package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository root, relative to this package's directory.
const root = "../.."

// markdownFiles returns the Markdown files whose links are checked, as
// paths relative to root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md"}
	var found []string
	for _, pattern := range []string{"docs/*.md", "bench/*.md", "examples/*/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pattern)))
		if err != nil {
			t.Fatalf("list %s: %v", pattern, err)
		}
		found = append(found, m...)
	}
	if len(found) == 0 {
		t.Fatalf("no Markdown files under %s/docs, bench or examples: run the test from internal/docscheck", root)
	}
	for _, d := range found {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatalf("docs path %s: %v", d, err)
		}
		files = append(files, rel)
	}
	return files
}

// mdLine is one line of a Markdown file outside fenced code blocks.
type mdLine struct {
	n    int // 1-based line number
	text string
}

// proseLines returns the lines of a Markdown file that are not inside a
// fenced code block (``` or ~~~).
func proseLines(t *testing.T, rel string) []mdLine {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	var out []mdLine
	fence := ""
	for i, l := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(l)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		out = append(out, mdLine{n: i + 1, text: l})
	}
	return out
}

var (
	headingRE  = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	codeSpanRE = regexp.MustCompile("`[^`]*`")
	linkRE     = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	inlineRE   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// anchors returns the anchors GitHub gives the headings of a Markdown
// file: lower-cased, punctuation other than '-' and '_' dropped, spaces
// made '-', and "-1", "-2" … appended to repeats.
func anchors(t *testing.T, rel string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(t, rel) {
		m := headingRE.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		text := inlineRE.ReplaceAllString(m[1], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// TestRelativeLinksResolve fails for a relative link in the docs whose
// file does not exist or whose #fragment names no heading of its file.
func TestRelativeLinksResolve(t *testing.T) {
	cache := map[string]map[string]bool{}
	anchorsOf := func(rel string) map[string]bool {
		if a, ok := cache[rel]; ok {
			return a
		}
		cache[rel] = anchors(t, rel)
		return cache[rel]
	}
	checked := 0
	for _, file := range markdownFiles(t) {
		for _, l := range proseLines(t, file) {
			prose := codeSpanRE.ReplaceAllString(l.text, "")
			for _, m := range linkRE.FindAllStringSubmatch(prose, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, fragment, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Clean(filepath.Join(filepath.Dir(file), path))
					if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
						t.Errorf("%s:%d: link %q: %s does not exist; fix the path or add the file", file, l.n, target, dest)
						continue
					}
				}
				if fragment == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if !anchorsOf(dest)[fragment] {
					t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s; fix the fragment or the heading", file, l.n, target, dest, fragment)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no relative links at all: the link pattern no longer matches the docs")
	}
}

// TestEveryDocIsLinkedFromTheReadme fails for a page in docs/ that the
// README does not link to, which a reader arriving at the README would
// never find.
func TestEveryDocIsLinkedFromTheReadme(t *testing.T) {
	var linked []string
	for _, l := range proseLines(t, "README.md") {
		for _, m := range linkRE.FindAllStringSubmatch(l.text, -1) {
			path, _, _ := strings.Cut(m[1], "#")
			linked = append(linked, filepath.Clean(path))
		}
	}
	for _, file := range markdownFiles(t) {
		if strings.HasPrefix(file, "docs"+string(filepath.Separator)) && !slices.Contains(linked, file) {
			t.Errorf("README.md does not link to %s; add it to the README's Documentation section", file)
		}
	}
}

// TestReadmeKeepsTheSetUpCommands fails when the README's set-up section
// loses either of the two commands a fresh machine starts with.
func TestReadmeKeepsTheSetUpCommands(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatalf("read README.md: %v", err)
	}
	_, setUp, ok := strings.Cut(string(raw), "\n## Set up (fresh Debian machine with Go 1.26)\n")
	if !ok {
		t.Fatal(`README.md has no "## Set up (fresh Debian machine with Go 1.26)" section; keep it, it is the first thing a new user runs`)
	}
	setUp, _, _ = strings.Cut(setUp, "\n## ")
	for _, cmd := range []string{"go run ./cmd/rpr demo", "make test"} {
		found := false
		for _, line := range strings.Split(setUp, "\n") {
			if strings.HasPrefix(line, cmd+" ") {
				found = true
			}
		}
		if !found {
			t.Errorf("README.md's set-up section lost the command %q; put it back at the start of a line of its code block", cmd)
		}
	}
	// Exactly two: one that runs the main job, one that runs the tests.
	block, inBlock, commands := "", false, 0
	for _, line := range strings.Split(setUp, "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			inBlock = !inBlock
		case inBlock && strings.TrimSpace(line) != "":
			commands++
			block += "\n  " + line
		}
	}
	if commands != 2 {
		t.Errorf("README.md's set-up block has %d commands, want exactly the two (go run ./cmd/rpr demo, make test); move the others to docs/:%s", commands, block)
	}
}
