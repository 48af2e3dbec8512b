package main

// The helpers every command prints with: exit statuses and the error line,
// tables, JSON, and the small text forms (counts, ages, dashes, cut lines)
// that keep the commands' output alike.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/term"
)

// Exit statuses, the same for every command.
const (
	// exitFailed: the command ran and the answer is no (no live worker,
	// a failed call, an id that is not there, a refused change).
	exitFailed = 1
	// exitBadInput: the command could not do its job at all (bad input,
	// Redis unreachable or unreadable).
	exitBadInput = 2
)

// exitError ends rpr with a given exit status; cause, when set, is printed.
type exitError struct {
	code  int
	cause error
}

func (e exitError) Error() string {
	if e.cause != nil {
		return e.cause.Error()
	}
	return fmt.Sprintf("exit status %d", e.code)
}

// badInput is err as exit status 2: the command could not do its job.
func badInput(err error) error { return exitError{code: exitBadInput, cause: err} }

// failed is err as exit status 1: the command ran, and the answer is no.
func failed(err error) error { return exitError{code: exitFailed, cause: err} }

// reportError prints the error a command ended with on w, as one line
// starting "rpr: ", and returns the exit status it stands for: 0 for none,
// an exitError's own, 1 for any other.
func reportError(w io.Writer, err error) int {
	var exit exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		if exit.cause != nil {
			fmt.Fprintln(w, "rpr:", strings.TrimPrefix(exit.cause.Error(), "rpr: "))
		}
		return exit.code
	}
	fmt.Fprintln(w, "rpr:", strings.TrimPrefix(err.Error(), "rpr: "))
	return exitFailed
}

// checkOutput refuses an -o value other than the two formats a command
// prints, the second of which is json.
func checkOutput(output, text, json string) error {
	if output != text && output != json {
		return badInput(fmt.Errorf("-o %q: want %s or %s, e.g. -o %s", output, text, json, json))
	}
	return nil
}

// newTable returns a writer that aligns tab-separated cells in columns two
// spaces apart; Flush writes the table.
func newTable(out io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
}

// writeJSON writes v as indented JSON (-o json).
func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeJSONUnescaped is writeJSON without HTML escaping, for documents
// whose strings hold "=>" or "<": they read as written.
func writeJSONUnescaped(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// count is "1 dead letter", "3 dead letters".
func count(n int, noun string) string {
	return strconv.Itoa(n) + " " + noun + plural(n)
}

// plural is the "s" of n things ("" for one).
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// orDash is s, or "-" for an empty cell.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// truncate cuts s to width runes, ending in "…"; width 0 means no limit.
func truncate(s string, width int) string {
	if width <= 0 || utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}

// formatAge prints a duration compactly for a table cell: 850ms, 12.3s,
// 4m05s, 2h03m, 3d04h.
func formatAge(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Truncate(100*time.Millisecond).Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// outputWidth is the width to fit lines to: the terminal's, else
// $COLUMNS, else 0 (no limit: a pipe gets whole lines).
func outputWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			return cols
		}
	}
	if cols, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && cols > 0 {
		return cols
	}
	return 0
}

// isTerminal reports whether v is a terminal (a progress bar, a status
// line, a question is worth drawing on it).
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
