// Package docscheck holds the tests that keep rpr's Markdown documentation
// consistent: every relative link in README.md, CHANGELOG.md, docs/*.md
// and the READMEs of bench/ and examples/ names a file that exists and,
// when it carries a #fragment, a heading of that file (as GitHub names
// heading anchors); every page in docs/ is linked from README.md; and the
// README keeps its two set-up commands. The package has no code of its
// own.
package docscheck
