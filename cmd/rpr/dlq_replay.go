package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

const (
	// progressMin is the smallest set replay and drop draw a progress bar
	// for: smaller ones finish before a bar is worth its flicker.
	progressMin = 100
	// skippedShown is how many skipped letters a replay lists by id.
	skippedShown = 20
)

func newDlqReplayCommand() *cobra.Command {
	var f selectFlags
	cmd := &cobra.Command{
		Use:   "replay SERVICE (ID... | --all | filters)",
		Short: "Queue dead letters again, attempts starting over",
		Long: `replay puts dead letters back in the service's request stream, each
atomically with its removal from the DLQ, so that a crash or Ctrl-C midway
neither loses nor duplicates one. A letter goes back to its shard, and to
the lane it failed in; when that lane has no live server any more, to the
default lane instead (the summary says how many). Attempts start over at 1, and the replay
is counted (see "replays" in "rpr dlq show"). Fix the cause first: a letter
that fails again comes back to the DLQ.

A letter whose idempotency key has succeeded since is dropped instead of
run again: the key's at-most-once promise stands. Unary requests and
entries whose envelope does not decode cannot be replayed: they are
skipped, listed with the reason, and stay in the DLQ ("rpr dlq drop" them).

` + selectionHelp + `

A bar on stderr shows the progress of large replays on a terminal.

Exit status: 0 when done; 1 when an ID named is not in the DLQ (nothing is
replayed) or cannot be replayed; 2 on bad input.`,
		Example: `  rpr dlq replay examples.orders.v1.Orders 1764434400123-0 1764434400456-0
  rpr dlq replay examples.orders.v1.Orders --code UNAVAILABLE --newer-than 2h
  rpr dlq replay examples.orders.v1.Orders --all --dry-run
  rpr dlq replay examples.orders.v1.Orders --all`,
		Args:              usageArgs(1, -1, "rpr dlq replay SERVICE (ID... | --all | filters), e.g. rpr dlq replay examples.orders.v1.Orders --all"),
		ValidArgsFunction: completeServices(&f.rf, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, ids := cmd.Context(), args[1:]
			t, letters, err := f.selected(cmd, args, "replay")
			if t != nil {
				defer t.rdb.Close()
			}
			if err != nil || len(letters) == 0 {
				return err
			}
			out := cmd.OutOrStdout()
			progress, finish := progressFor(cmd.ErrOrStderr(), len(letters), "replaying")
			res, err := t.queue.Replay(ctx, letters, progress)
			finish()
			printReplay(out, t.service, len(letters), res)
			if err != nil {
				return fmt.Errorf("replay stopped: %w (what is counted above is done; the rest is still in the DLQ)", err)
			}
			if res.Replayed > 0 {
				if h, err := t.svc.Health(ctx); err == nil && !h.Serving() {
					fmt.Fprintf(out, "note: %s has no live worker: the replayed requests wait in its queue until one starts\n", t.service)
				}
			}
			if len(ids) > 0 && len(res.Skipped) > 0 {
				return exitError{code: exitFailed}
			}
			return nil
		},
	}
	f.register(cmd, "replay")
	return cmd
}

// printReplay summarizes a replay.
func printReplay(out io.Writer, service string, selected int, res admin.ReplayResult) {
	fmt.Fprintf(out, "replayed %d of %s of %s\n", res.Replayed, count(selected, "dead letter"), service)
	skipped := "cannot be replayed; left in the DLQ"
	if len(res.Skipped) == 0 {
		skipped = "-"
	}
	rows := []struct {
		label string
		n     int
		about string
	}{
		{"replayed", res.Replayed, "queued again, attempts starting over at 1"},
		{"already succeeded", res.AlreadySucceeded, "dropped: another request with the same idempotency key succeeded since"},
		{"gone", res.Gone, "no longer in the DLQ (replayed or dropped by someone else meanwhile)"},
		{"skipped", len(res.Skipped), skipped},
	}
	width := 0
	for _, r := range rows {
		width = max(width, len(strconv.Itoa(r.n)))
	}
	for _, r := range rows {
		fmt.Fprintf(out, "  %-17s  %*d  %s\n", r.label, width, r.n, r.about)
	}
	lanes := make([]string, 0, len(res.Rerouted))
	for lane := range res.Rerouted {
		lanes = append(lanes, lane)
	}
	sort.Strings(lanes)
	for _, lane := range lanes {
		fmt.Fprintf(out, "note: %s of lane %s went to the %s lane instead: lane %s has no live server\n",
			count(res.Rerouted[lane], "dead letter"), lane, tunnel.DefaultLane, lane)
	}
	ids := make([]string, 0, len(res.Skipped))
	for id := range res.Skipped {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for i, id := range ids {
		if i == skippedShown && len(ids) > skippedShown+1 {
			fmt.Fprintf(out, "    … and %d more (rpr dlq ls %s shows them all)\n", len(ids)-i, service)
			break
		}
		fmt.Fprintf(out, "    %s  %s\n", id, res.Skipped[id])
	}
}

// progressFor returns a callback that draws a progress bar on w, and a
// function that ends it. Both do nothing (and the callback is nil) unless
// w is a terminal and total is at least progressMin: a pipe or a log gets
// only the summary.
func progressFor(w io.Writer, total int, what string) (func(done int), func()) {
	if total < progressMin || !isTerminal(w) {
		return nil, func() {}
	}
	return startProgressBar(w, total, what)
}

func startProgressBar(w io.Writer, total int, what string) (func(done int), func()) {
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetRenderBlankState(true),
	)
	return func(done int) { _ = bar.Set(done) }, func() { _ = bar.Finish() }
}
