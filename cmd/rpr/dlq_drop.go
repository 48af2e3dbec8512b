package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func newDlqDropCommand() *cobra.Command {
	var f selectFlags
	var yes bool
	cmd := &cobra.Command{
		Use:   "drop SERVICE (ID... | --all | filters)",
		Short: "Delete dead letters, after asking",
		Long: `drop deletes dead letters for good: their requests will never run. It
shows what it selected and asks "Drop N dead letters of SERVICE? [y/N]" on
stderr, reading the answer from stdin; --yes skips the question. When stdin
is not a terminal, drop reads what is there: anything but y or yes, an
empty input or no answer within 5s, means no.

` + selectionHelp + `

Exit status: 0 when dropped (or nothing was selected); 1 when not confirmed
or when an ID named is not in the DLQ (nothing is dropped); 2 on bad input.`,
		Example: `  rpr dlq drop examples.orders.v1.Orders 1764434400123-0
  rpr dlq drop examples.orders.v1.Orders --code INVALID_ARGUMENT --older-than 7d
  rpr dlq drop examples.orders.v1.Orders --all --yes`,
		Args:              usageArgs(1, -1, "rpr dlq drop SERVICE (ID... | --all | filters), e.g. rpr dlq drop examples.orders.v1.Orders 1764434400123-0"),
		ValidArgsFunction: completeServices(&f.rf, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			t, letters, err := f.selected(cmd, args, "drop")
			if t != nil {
				defer t.rdb.Close()
			}
			if err != nil || len(letters) == 0 {
				return err
			}
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			question := fmt.Sprintf("Drop %s of %s?", count(len(letters), "dead letter"), t.service)
			if !yes {
				printBreakdown(errOut, letters)
				ok, err := confirm(ctx, cmd.InOrStdin(), errOut, question)
				if err != nil {
					return err
				}
				if !ok {
					return failed(errors.New("not confirmed: nothing dropped (answer y, or pass --yes)"))
				}
			}
			entryIDs := make([]string, len(letters))
			for i, dl := range letters {
				entryIDs[i] = dl.EntryID
			}
			progress, finish := progressFor(errOut, len(entryIDs), "dropping")
			n, err := t.queue.Drop(ctx, entryIDs, progress)
			finish()
			fmt.Fprintf(out, "dropped %s of %s", count(int(n), "dead letter"), t.service)
			if gone := int64(len(entryIDs)) - n; gone > 0 && err == nil {
				fmt.Fprintf(out, " (%d already gone: replayed or dropped meanwhile)", gone)
			}
			fmt.Fprintln(out)
			if err != nil {
				return fmt.Errorf("drop stopped: %w (the rest is still in the DLQ)", err)
			}
			return nil
		},
	}
	f.register(cmd, "drop")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "drop without asking")
	return cmd
}

// confirmWait bounds how long drop waits for an answer on a stdin that is
// not a terminal (a pipe a parent never closes must not hang it); a
// variable for tests.
var confirmWait = 5 * time.Second

// confirm asks question on w and reads a y/N answer from in. Input that is
// not a terminal is read as it is, and an end of input or no answer within
// confirmWait is a no: drop never hangs in a script.
func confirm(ctx context.Context, in io.Reader, w io.Writer, question string) (bool, error) {
	fmt.Fprintf(w, "%s [y/N] ", question)
	answers := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(in).ReadString('\n')
		answers <- line
	}()
	var timeout <-chan time.Time
	if !isTerminal(in) {
		timer := time.NewTimer(confirmWait)
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case line := <-answers:
		switch {
		case !isTerminal(in):
			// Not echoed: show what was read, for the log's reader.
			fmt.Fprintln(w, strings.TrimSpace(line))
		case !strings.HasSuffix(line, "\n"):
			fmt.Fprintln(w) // end of input: the answer did not end the line
		}
		a := strings.ToLower(strings.TrimSpace(line))
		return a == "y" || a == "yes", nil
	case <-timeout:
		fmt.Fprintf(w, "\nno answer on stdin within %v\n", confirmWait)
		return false, nil
	case <-ctx.Done():
		fmt.Fprintln(w)
		return false, context.Cause(ctx)
	}
}
