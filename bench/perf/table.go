package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/rprtunnel/rpr/bench/internal/compare"
)

// printTable prints the rows as one Markdown table: goal, figure, rpr,
// baseline (and what it is), ratio, target, met.
func printTable(w io.Writer, rows []compare.Row) {
	cells := [][]string{{"goal", "figure", "rpr", "baseline", "ratio", "target", "met"}}
	for _, r := range rows {
		base := compare.Num(r.Baseline)
		if r.BaselineOf != "" && base != "—" {
			base += " (" + r.BaselineOf + ")"
		}
		target := r.Target.String()
		if r.AsWritten {
			target += " as written"
		}
		cells = append(cells, []string{fmt.Sprint(r.Goal), r.Figure, compare.Num(r.RPR), base, compare.Num(r.Ratio()), target, r.Met()})
	}
	width := make([]int, len(cells[0]))
	for _, row := range cells {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	line := func(row []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range row {
			fmt.Fprintf(&b, " %s%s |", c, strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)))
		}
		fmt.Fprintln(w, b.String())
	}
	line(cells[0])
	sep := make([]string, len(width))
	for i, n := range width {
		sep[i] = strings.Repeat("-", n)
	}
	line(sep)
	for _, row := range cells[1:] {
		line(row)
	}
	var judged, asWritten tally
	for _, r := range rows {
		if r.AsWritten {
			asWritten.add(r)
		} else {
			judged.add(r)
		}
	}
	fmt.Fprintf(w, "\n%d of %d targets met (rows without a target are reported for comparison).\n", judged.met, judged.all)
	if asWritten.all > 0 {
		fmt.Fprintf(w, "Targets as issue 18 wrote them, for goals judged against the plain Streams RPC of the same run: %d of %d met (docs/performance.md says why).\n",
			asWritten.met, asWritten.all)
	}
}

// tally counts rows with a target and those that meet it.
type tally struct{ met, all int }

func (t *tally) add(r compare.Row) {
	switch r.Met() {
	case "yes":
		t.met++
		t.all++
	case "no":
		t.all++
	}
}
