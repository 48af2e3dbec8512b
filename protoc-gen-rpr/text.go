package main

// The text of generated code: doc comments built of paragraphs, proto
// comments carried over, deprecation notices and string literals.

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/compiler/protogen"
)

// deprecated is the paragraph that marks a deprecated declaration, in the
// form tools such as staticcheck and gopls recognize.
const deprecated = "Deprecated: Do not use."

// writeDoc writes a Go doc comment made of paragraphs, separated by empty
// "//" lines. A paragraph may span several lines. Empty
// paragraphs are left out, so optional parts (a proto comment, a deprecation
// notice) can be passed unconditionally; with none left, it writes nothing.
func writeDoc(g *protogen.GeneratedFile, paragraphs ...string) {
	first := true
	for _, p := range paragraphs {
		if p == "" {
			continue
		}
		if !first {
			g.P("//")
		}
		first = false
		for _, line := range strings.Split(p, "\n") {
			if line == "" {
				g.P("//")
			} else {
				g.P("// ", line)
			}
		}
	}
}

// paragraph formats a paragraph of generated documentation, wrapped to fit
// an 80-column line after "// " (names are long; proto comments are kept as
// their author wrapped them).
func paragraph(format string, args ...any) string {
	const width = 77
	var b strings.Builder
	lineLen := 0
	for _, word := range strings.Fields(fmt.Sprintf(format, args...)) {
		switch {
		case lineLen == 0:
		case lineLen+1+len(word) > width:
			b.WriteString("\n")
			lineLen = 0
		default:
			b.WriteString(" ")
			lineLen++
		}
		b.WriteString(word)
		lineLen += len(word)
	}
	return b.String()
}

// protoComment turns a comment from a .proto file into a doc comment
// paragraph: without the one space that usually follows "//" (the
// indentation of the lines after it is kept), trailing spaces and empty
// lines at either end.
func protoComment(c protogen.Comments) string {
	ls := strings.Split(string(c), "\n")
	for i, l := range ls {
		ls[i] = strings.TrimRight(strings.TrimPrefix(l, " "), " \t")
	}
	for len(ls) > 0 && ls[0] == "" {
		ls = ls[1:]
	}
	for len(ls) > 0 && ls[len(ls)-1] == "" {
		ls = ls[:len(ls)-1]
	}
	return strings.Join(ls, "\n")
}

// deprecatedIf returns the deprecation paragraph when cond holds, else "".
func deprecatedIf(cond bool) string {
	if cond {
		return deprecated
	}
	return ""
}

// quote returns s as a Go string literal.
func quote(s string) string { return strconv.Quote(s) }
