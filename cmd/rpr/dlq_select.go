package main

// How rpr dlq replay and drop choose the dead letters they act on.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
)

// selectFlags are the ways replay and drop take a set of dead letters.
type selectFlags struct {
	rf     redisFlags
	sel    dlqSelection
	all    bool
	dryRun bool
}

func (f *selectFlags) register(cmd *cobra.Command, verb string) {
	f.rf.register(cmd)
	f.sel.register(cmd, 0, "with --all or filters: "+verb+" at most this many, oldest first (0: no limit)")
	cmd.Flags().BoolVar(&f.all, "all", false, "every dead letter of the service (that the filters match, if any)")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "show what would be "+pastTense(verb)+" and change nothing")
}

func pastTense(verb string) string {
	if verb == "drop" {
		return "dropped"
	}
	return verb + "ed"
}

// selectionHelp explains how replay and drop choose dead letters.
const selectionHelp = `Which dead letters: the IDs named (entry ids or request ids, as "rpr dlq ls"
prints them); or those the filters match (--method, --code, --older-than,
--newer-than, with --limit); or --all. With none of these the command
refuses, so that a bare command never touches a whole DLQ. --dry-run
shows the selection and changes nothing.`

// check refuses a selection that is empty or ambiguous (exit status 2),
// before anything touches Redis.
func (f *selectFlags) check(cmd *cobra.Command, verb string, ids []string) (admin.DeadLetterFilter, error) {
	filter, err := f.sel.filter()
	if err != nil {
		return filter, err
	}
	switch {
	case len(ids) > 0 && (f.all || f.sel.filtered()):
		return filter, badInput(fmt.Errorf("pass either IDs or a selection (--all or filters), not both"))
	case len(ids) > 0 && cmd.Flags().Changed("limit"):
		return filter, badInput(fmt.Errorf("--limit applies to --all and filters, not to IDs"))
	case len(ids) == 0 && !f.all && !f.sel.filtered():
		return filter, badInput(fmt.Errorf(
			"say which dead letters to %s: pass IDs (from \"rpr dlq ls %s\"), a filter (--method, --code, --older-than, --newer-than) or --all",
			verb, cmd.Flags().Arg(0)))
	}
	for _, id := range ids {
		if err := checkID(id); err != nil {
			return filter, err
		}
	}
	return filter, nil
}

// resolve returns the dead letters the arguments select. Named IDs must
// all be in the DLQ: otherwise nothing is done (exit status 1), since a
// mistyped id in a list is better caught than half-applied.
func (f *selectFlags) resolve(ctx context.Context, t *dlqTarget, filter admin.DeadLetterFilter, ids []string) ([]admin.DeadLetter, error) {
	if len(ids) == 0 {
		return t.queue.List(ctx, filter, f.sel.limit.n)
	}
	var out []admin.DeadLetter
	var missing []string
	seen := map[string]bool{}
	var byRequest map[string]admin.DeadLetter // built on the first request id: one scan for all
	for _, id := range ids {
		var dl admin.DeadLetter
		var ok bool
		if isEntryID(id) {
			got, err := t.queue.Get(ctx, id)
			switch {
			case errors.Is(err, admin.ErrNoDeadLetter):
			case err != nil:
				return nil, err
			default:
				dl, ok = got, true
			}
		} else {
			if byRequest == nil {
				all, err := t.queue.List(ctx, admin.DeadLetterFilter{}, 0)
				if err != nil {
					return nil, err
				}
				byRequest = map[string]admin.DeadLetter{}
				for _, d := range all {
					if _, dup := byRequest[d.RequestID]; !dup && d.RequestID != "" {
						byRequest[d.RequestID] = d
					}
				}
			}
			dl, ok = byRequest[id]
		}
		switch {
		case !ok:
			missing = append(missing, id)
		case !seen[dl.EntryID]:
			seen[dl.EntryID] = true
			out = append(out, dl)
		}
	}
	if len(missing) > 0 {
		return nil, failed(fmt.Errorf("%w; nothing changed", t.notFound(ctx, missing)))
	}
	return out, nil
}

// selected checks the arguments of replay or drop (verb), opens the DLQ
// and returns the dead letters they select, to act on. When none is
// selected, or with --dry-run, it reports that itself and returns no
// letters. A non-nil t is open even on error: the caller closes t.rdb.
func (f *selectFlags) selected(cmd *cobra.Command, args []string, verb string) (t *dlqTarget, letters []admin.DeadLetter, err error) {
	if err := checkService(args[0]); err != nil {
		return nil, nil, err
	}
	ids := args[1:]
	filter, err := f.check(cmd, verb, ids)
	if err != nil {
		return nil, nil, err
	}
	ctx := cmd.Context()
	if t, err = openDLQ(ctx, f.rf, args[0]); err != nil {
		return nil, nil, err
	}
	if letters, err = f.resolve(ctx, t, filter, ids); err != nil {
		return t, nil, err
	}
	out := cmd.OutOrStdout()
	switch {
	case len(letters) == 0:
		return t, nil, nothingSelected(ctx, out, t, &f.sel, verb)
	case f.dryRun:
		fmt.Fprintf(out, "would %s %s of %s (dry run: nothing changed):\n", verb, count(len(letters), "dead letter"), t.service)
		printBreakdown(out, letters)
		return t, nil, nil
	}
	return t, letters, nil
}

// nothingSelected says that a filter or --all selected no dead letter; an
// empty DLQ of a service Redis does not know is the unknown-service
// error.
func nothingSelected(ctx context.Context, out io.Writer, t *dlqTarget, sel *dlqSelection, verb string) error {
	if total, err := t.queue.Len(ctx); err == nil && total == 0 {
		if err := requireService(ctx, t.a, t.url, t.service); err != nil {
			return err
		}
	}
	if sel.filtered() {
		fmt.Fprintf(out, "nothing to %s: no dead letter of %s matches %s\n", verb, t.service, sel.describe())
		return nil
	}
	fmt.Fprintf(out, "nothing to %s: %s has no dead letters (%s)\n", verb, t.service, t.empty())
	return nil
}

// printBreakdown summarizes letters by method and code, largest group first.
func printBreakdown(out io.Writer, letters []admin.DeadLetter) {
	type group struct {
		method, code string
		n            int
	}
	index := map[[2]string]*group{}
	var groups []*group
	for _, dl := range letters {
		k := [2]string{orDash(dl.Method), codeText(dl.Code)}
		if dl.DecodeError != "" {
			k = [2]string{"(undecodable)", codeText(dl.Code)}
		}
		g := index[k]
		if g == nil {
			g = &group{method: k[0], code: k[1]}
			index[k] = g
			groups = append(groups, g)
		}
		g.n++
	}
	sort.SliceStable(groups, func(i, j int) bool { return groups[i].n > groups[j].n })
	countWidth := len(strconv.Itoa(groups[0].n)) // the largest group's
	tw := newTable(out)
	for _, g := range groups {
		fmt.Fprintf(tw, "  %*d\t%s\t%s\n", countWidth, g.n, g.method, g.code)
	}
	_ = tw.Flush()
}
