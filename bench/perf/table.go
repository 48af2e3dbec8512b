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
		cells = append(cells, []string{fmt.Sprint(r.Goal), r.Figure, compare.Num(r.RPR), base, compare.Num(r.Ratio()), r.Target.String(), r.Met()})
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
	met, all := 0, 0
	for _, r := range rows {
		switch r.Met() {
		case "yes":
			met++
			all++
		case "no":
			all++
		}
	}
	fmt.Fprintf(w, "\n%d of %d targets met (rows without a target are reported for comparison).\n", met, all)
}
