package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

// traceTimeout bounds a trace: a look in every shard and lane of every
// service.
const traceTimeout = 10 * time.Second

func newTraceCommand() *cobra.Command {
	var rf redisFlags
	var service string
	cmd := &cobra.Command{
		Use:   "trace REQUEST-ID",
		Short: "Show what Redis still knows about one request",
		Long: `trace decodes a request id (date, business code, time) and shows what Redis
still knows about the request: its state and the times of its transitions,
the worker that ran it (and the one it was taken over from), its stream
entry while it waits or runs, the stored answer, and dead letters. State is
kept until 10s after the request's deadline.

The id does not name its service, shard or lane: trace looks in every
service it finds, or only in --service, and in each in every shard and
lane (the default lane, those its routes name and those its workers
serve).`,
		Example: `  rpr trace 20261129-ORD1-1764434400123-K7P2QXM4RT`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := tunnel.ParseRequestID(args[0])
			if err != nil {
				return badInput(err)
			}
			ctx, a, done, err := rf.connect(cmd, traceTimeout)
			if err != nil {
				return err
			}
			defer done()
			var tr *admin.RequestTrace
			if service != "" {
				tr, err = a.Service(service).Trace(ctx, args[0])
			} else {
				tr, err = a.Trace(ctx, args[0])
			}
			if err != nil {
				return badInput(err)
			}
			printTrace(cmd.OutOrStdout(), args[0], id, tr)
			if tr.Service == "" {
				return exitError{code: exitFailed}
			}
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVar(&service, "service", "", "look only in this service (pkg.Svc)")
	return cmd
}

func printTrace(out io.Writer, raw string, id tunnel.RequestID, tr *admin.RequestTrace) {
	stamp := func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000 UTC") }
	fmt.Fprintf(out, "request   %s\n", raw)
	fmt.Fprintf(out, "  made    %s by business code %s\n", stamp(id.Time), id.Biz)
	if tr.Service == "" {
		fmt.Fprintln(out, "  Redis knows nothing of it: it was never sent here; or it is a unary call that finished, which")
		fmt.Fprintln(out, "  leaves nothing in Redis (its answer went to its caller; its spans and log lines carry the id);")
		fmt.Fprintln(out, "  or its record expired (10s after its deadline; for async requests, after the idempotency window)")
		return
	}
	fmt.Fprintf(out, "service   %s\n", tr.Service)
	if tr.Shards > 1 {
		fmt.Fprintf(out, "shard     %d of %d\n", tr.Shard, tr.Shards)
	}
	if tr.Lane != "" {
		fmt.Fprintf(out, "lane      %s\n", tr.Lane)
	}
	if tr.Key != "" && tr.Key != raw {
		fmt.Fprintf(out, "key       %s (async; its state is the key's)\n", tr.Key)
	}
	state := tr.State
	if state == "" {
		state = "(none: not yet taken by a worker)"
	}
	fmt.Fprintf(out, "state     %s\n", state)
	row := func(what string, t time.Time, extra string) {
		if !t.IsZero() {
			fmt.Fprintf(out, "  %-8s%s  +%v %s\n", what, stamp(t), t.Sub(id.Time).Round(time.Millisecond), extra)
		}
	}
	row("claimed", tr.Claimed, strings.TrimSpace("by "+tr.Worker+" (attempt "+tr.Attempt+")"))
	if tr.PreviousWorker != "" {
		fmt.Fprintf(out, "  taken over from worker %s, which died while running it\n", tr.PreviousWorker)
	}
	row("done", tr.Done, "")
	row("marked", tr.Marked, "by the caller or an expired deadline")
	if tr.State == "PROCESSING" && !tr.LeaseUntil.IsZero() {
		fmt.Fprintf(out, "  lease   until %s\n", stamp(tr.LeaseUntil))
	}
	if tr.ExpiresIn > 0 {
		fmt.Fprintf(out, "  state expires in %v\n", tr.ExpiresIn.Round(time.Millisecond))
	}
	if q := tr.Queued; q != nil {
		deadline := "none"
		if !q.Deadline.IsZero() {
			deadline = stamp(q.Deadline)
		}
		fmt.Fprintf(out, "entry     %s in the request stream: %s, enqueued %s, deadline %s\n", q.ID, q.Method, stamp(q.Enqueued), deadline)
		for _, k := range slices.Sorted(maps.Keys(q.Header)) {
			fmt.Fprintf(out, "  header  %s: %s\n", k, strings.Join(q.Header[k], ", "))
		}
	}
	if a := tr.Answer; a != nil {
		switch {
		case a.Code == tunnel.OK && tr.Stream != nil:
			fmt.Fprintln(out, "answer    OK (the stream's status)")
		case a.Code == tunnel.OK:
			fmt.Fprintf(out, "answer    OK, %d bytes\n", a.Bytes)
		default:
			fmt.Fprintf(out, "answer    %s: %s\n", a.Code, a.Message)
		}
	}
	if st := tr.Stream; st != nil {
		fmt.Fprintf(out, "stream    the server sent %d messages and received %d\n", st.Sent, st.Received)
	}
	if r := tr.Retry; r != nil {
		fmt.Fprintf(out, "retry     attempt %d due %s (in the retry set)\n", r.Attempt, stamp(r.Due))
	}
	for _, d := range tr.DeadLetters {
		fmt.Fprintf(out, "dead letter %s at %s: %s\n", d.ID, stamp(d.Time), d.Reason)
	}
}
