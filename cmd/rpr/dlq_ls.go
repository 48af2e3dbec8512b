package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

const (
	// dlqLsLimit is how many dead letters `rpr dlq ls` shows by default.
	dlqLsLimit = 50
	// minReasonWidth is the narrowest the REASON column is cut to.
	minReasonWidth = 24
)

func newDlqLsCommand() *cobra.Command {
	var rf redisFlags
	var sel dlqSelection
	var output string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "ls SERVICE",
		Short: "List a service's dead letters, oldest first",
		Long: `ls lists a service's dead letters, oldest first: entry id, request id,
method, the last attempt's status code, attempts, time since it was
dead-lettered, and why (cut to the terminal's width, or $COLUMNS). The
footer counts what is shown, what the DLQ holds and what the filters match.

-o json prints every field instead, payloads included (decoded with the
service's published schema when Redis has it, and always as base64).`,
		Example: `  rpr dlq ls examples.orders.v1.Orders
  rpr dlq ls examples.orders.v1.Orders --method Charge --code UNAVAILABLE --newer-than 1h
  rpr dlq ls examples.orders.v1.Orders --older-than 2d --limit 0 -o json | jq '.dead_letters[].request_id'`,
		Args:              usageArgs(1, 1, "rpr dlq ls SERVICE, e.g. rpr dlq ls examples.orders.v1.Orders"),
		ValidArgsFunction: completeServices(&rf, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkService(args[0]); err != nil {
				return err
			}
			if err := checkOutput(output, "table", "json"); err != nil {
				return err
			}
			filter, err := sel.filter()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			t, err := openDLQ(ctx, rf, args[0])
			if err != nil {
				return err
			}
			defer t.rdb.Close()
			return runDlqLs(ctx, cmd.OutOrStdout(), t, &sel, filter, output == "json")
		},
	}
	rf.register(cmd)
	sel.register(cmd, dlqLsLimit, "show at most this many (0: all)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "give up on Redis after this long")
	return cmd
}

func runDlqLs(ctx context.Context, out io.Writer, t *dlqTarget, sel *dlqSelection, filter admin.DeadLetterFilter, asJSON bool) error {
	total, err := t.queue.Len(ctx)
	if err != nil {
		return err
	}
	var letters []admin.DeadLetter
	matched := total
	switch {
	case total == 0:
	case sel.filtered():
		// Counting the matches means reading them all.
		if letters, err = t.queue.List(ctx, filter, 0); err != nil {
			return err
		}
		matched = int64(len(letters))
		if sel.limit.n > 0 && len(letters) > sel.limit.n {
			letters = letters[:sel.limit.n]
		}
	default:
		if letters, err = t.queue.List(ctx, filter, sel.limit.n); err != nil {
			return err
		}
	}
	if total == 0 {
		// Nothing there: perhaps a mistyped name.
		if err := requireService(ctx, t.a, t.url, t.service); err != nil {
			return err
		}
	}
	capacity, err := t.queue.Capacity(ctx)
	if err != nil {
		return err
	}
	now := t.redisNow(ctx)
	if asJSON {
		dec := newPayloadDecoder(ctx, t)
		doc := struct {
			Service string `json:"service"`
			// DLQ is shard 0's stream; Streams lists every shard's.
			DLQ     string   `json:"dlq"`
			Streams []string `json:"dlq_streams"`
			Total   int64    `json:"total"`
			Matched int64    `json:"matched"`
			Shown   int      `json:"shown"`
			// Cap is each stream's cap (0: none announced); FullShards
			// lists the shards whose stream is at it.
			Cap         int64        `json:"cap"`
			FullShards  []int        `json:"full_shards"`
			DeadLetters []deadLetter `json:"dead_letters"`
		}{Service: t.service, DLQ: t.streams[0], Streams: t.streams, Total: total, Matched: matched, Shown: len(letters),
			Cap: capacity.Cap, FullShards: append([]int{}, capacity.Full...), DeadLetters: []deadLetter{}}
		for _, dl := range letters {
			doc.DeadLetters = append(doc.DeadLetters, toJSON(dl, dec))
		}
		return writeJSON(out, doc)
	}
	switch {
	case total == 0:
		fmt.Fprintf(out, "%s has no dead letters (%s)\n", t.service, t.empty())
		return nil
	case len(letters) == 0:
		fmt.Fprintf(out, "none of the %d dead letters of %s match %s\n", total, t.service, sel.describe())
		return nil
	}
	printDeadLetterTable(out, letters, now, outputWidth(out))
	fmt.Fprintln(out, lsFooter(t.service, len(letters), total, matched, sel.filtered()))
	if line := fullLine(t.service, capacity); line != "" {
		fmt.Fprintln(out, line)
	}
	return nil
}

// fullLine warns that dead-letter streams are at their cap, and what that
// means; "" when none is.
func fullLine(service string, c admin.DeadLetterCapacity) string {
	if len(c.Full) == 0 {
		return ""
	}
	where := "its dead-letter stream is"
	if len(c.Lengths) > 1 {
		where = fmt.Sprintf("the dead-letter streams of shards %v are", c.Full)
	}
	return fmt.Sprintf("FULL: %s of %s at the cap of %d letters (ServerOptions.MaxDeadLetters): servers hold further dead letters back, nothing is dropped (async requests wait in the retry set, unreadable entries stay pending); replay or drop letters to make room (rpr dlq replay / rpr dlq drop)",
		where, service, c.Cap)
}

// lsFooter counts what ls showed against what the DLQ holds.
func lsFooter(service string, shown int, total, matched int64, filtered bool) string {
	switch {
	case int64(shown) < matched && filtered:
		return fmt.Sprintf("showing %d of %d dead letters of %s (%d match; oldest first; --limit 0 shows all)", shown, total, service, matched)
	case int64(shown) < matched:
		return fmt.Sprintf("showing %d of %d dead letters of %s (oldest first; --limit 0 shows all)", shown, total, service)
	case filtered:
		return fmt.Sprintf("%d of %d dead letters of %s match", matched, total, service)
	}
	return fmt.Sprintf("%s of %s", count(shown, "dead letter"), service)
}

// dlqColumns are the columns of `rpr dlq ls`; a LANE column follows
// METHOD when some letter was dead-lettered in a lane other than the
// default.
var dlqColumns = []string{"ENTRY", "REQUEST", "METHOD", "CODE", "ATTEMPTS", "AGE", "REASON"}

// printDeadLetterTable writes letters as an aligned table; width, when
// positive, is the line width the REASON column is cut to fit.
func printDeadLetterTable(out io.Writer, letters []admin.DeadLetter, now time.Time, width int) {
	columns := dlqColumns
	withLane := slices.ContainsFunc(letters, func(dl admin.DeadLetter) bool { return dl.Lane != tunnel.DefaultLane })
	if withLane {
		columns = slices.Insert(slices.Clone(dlqColumns), 3, "LANE")
	}
	rows := make([][]string, len(letters))
	widths := make([]int, len(columns))
	for i, c := range columns {
		widths[i] = len(c)
	}
	for i, dl := range letters {
		age := "-"
		if !dl.Failed.IsZero() {
			age = formatAge(max(now.Sub(dl.Failed), 0))
		}
		attempts := "-"
		if dl.Attempts > 0 {
			attempts = strconv.Itoa(dl.Attempts)
		}
		rows[i] = []string{dl.EntryID, orDash(dl.RequestID), orDash(shortMethod(dl.Method)), codeText(dl.Code), attempts, age, whyText(dl)}
		if withLane {
			rows[i] = slices.Insert(rows[i], 3, dl.Lane)
		}
		for j, cell := range rows[i][:len(rows[i])-1] {
			widths[j] = max(widths[j], utf8.RuneCountInString(cell))
		}
	}
	reasonWidth := 0 // no limit
	if width > 0 {
		used := 0
		for _, w := range widths[:len(widths)-1] {
			used += w + 2
		}
		reasonWidth = max(width-used, minReasonWidth)
	}
	tw := newTable(out)
	fmt.Fprintln(tw, strings.Join(columns, "\t"))
	for _, r := range rows {
		r[len(r)-1] = truncate(r[len(r)-1], reasonWidth)
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
}

// whyText says in one line why a letter is here: the reason, then the last
// attempt's error message when it adds something.
func whyText(dl admin.DeadLetter) string {
	why := dl.Reason
	if dl.Error != "" && !strings.Contains(why, dl.Error) {
		if why != "" {
			why += ": "
		}
		why += dl.Error
	}
	if why == "" && dl.DecodeError != "" {
		why = "undecodable envelope: " + dl.DecodeError
	}
	return orDash(strings.Join(strings.Fields(why), " "))
}

// shortMethod is "Charge" for "pkg.Svc/Charge".
func shortMethod(full string) string {
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[i+1:]
	}
	return full
}

// codeText names a letter's code; a letter without one (an undecodable
// entry written by hand) shows "-".
func codeText(c tunnel.Code) string {
	if c == tunnel.OK {
		return "-"
	}
	return c.String()
}
