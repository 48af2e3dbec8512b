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

// maxKeyBytes bounds idempotency keys (tunnel.WithIdempotencyKey).
const maxKeyBytes = 256

// traceTimeout bounds a trace: a look in every shard and lane of every
// service.
const traceTimeout = 10 * time.Second

func newTraceCommand() *cobra.Command {
	var rf redisFlags
	var service, output string
	cmd := &cobra.Command{
		Use:   "trace REQUEST-ID|IDEMPOTENCY-KEY",
		Short: "Show what Redis still knows about one request",
		Long: `trace decodes a request id (date, business code, time) and shows what Redis
still knows about the request: its state and the times of its transitions,
the worker that ran it (and the one it was taken over from), its stream
entry while it waits or runs, the stored answer, dead letters, and the
record its server kept when it finished.

What is kept, and for how long:
  unary calls    state until 10s after the deadline; once answered, a record
                 (outcome, worker, times, size; no payload) only when the
                 servers set tunnel.ServerOptions.Retention (rpr egress
                 --retention), for that long (default 0: none is kept)
  async requests state for the servers' idempotency window (default 24h)
                 after the last attempt, also when sent with a key of their own
  streams        state until 10s after the deadline (24h without one)

An argument that does not parse as a request id is taken as an async
request's idempotency key (tunnel.WithIdempotencyKey): trace shows the
key's state and the request it names.

Neither names its service, shard or lane: trace looks in every service it
finds, or only in --service, and in each in every shard and lane (the
default lane, those its routes name and those its workers serve).

-o json prints the same as JSON (snake_case keys, times in RFC 3339 UTC,
durations in ms); "found" is false, and the exit status 1, when no service
knows the request.`,
		Example: `  rpr trace 20261129-ORD1-1764434400123-K7P2QXM4RT
  rpr trace order-1042 --service shop.v1.Orders
  rpr trace 20261129-ORD1-1764434400123-K7P2QXM4RT -o json | jq .finished`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			if _, err := tunnel.ParseRequestID(args[0]); err != nil && (args[0] == "" || len(args[0]) > maxKeyBytes) {
				return badInput(fmt.Errorf("%q is neither a request id (YYYYMMDD-BIZ4-<unix ms>-<random>) nor an idempotency key (1 to %d bytes)", args[0], maxKeyBytes))
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
			if output == "json" {
				if err := writeJSON(cmd.OutOrStdout(), traceToJSON(args[0], tr)); err != nil {
					return err
				}
			} else {
				printTrace(cmd.OutOrStdout(), args[0], tr)
			}
			if tr.Service == "" {
				return exitError{code: exitFailed}
			}
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVar(&service, "service", "", "look only in this service (pkg.Svc)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

// printTrace writes what tr tells about the request or key raw.
func printTrace(out io.Writer, raw string, tr *admin.RequestTrace) {
	stamp := func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000 UTC") }
	madeAt := tr.ID.Time
	if tr.ByKey {
		fmt.Fprintf(out, "key       %s (not a request id: looked up as an async request's idempotency key)\n", raw)
	}
	if !madeAt.IsZero() {
		if tr.ByKey {
			fmt.Fprintf(out, "request   %s (the one Redis names under the key)\n", tr.ID)
		} else {
			fmt.Fprintf(out, "request   %s\n", raw)
		}
		fmt.Fprintf(out, "  made    %s by business code %s\n", stamp(madeAt), tr.ID.Biz)
	}
	if tr.Service == "" {
		printNotFound(out, tr)
		return
	}
	fmt.Fprintf(out, "service   %s\n", tr.Service)
	if tr.Shards > 1 {
		fmt.Fprintf(out, "shard     %d of %d\n", tr.Shard, tr.Shards)
	}
	if tr.Lane != "" {
		fmt.Fprintf(out, "lane      %s\n", tr.Lane)
	}
	if f := tr.Finished; f != nil && f.Method != "" && tr.Queued == nil {
		fmt.Fprintf(out, "method    %s/%s\n", tr.Service, f.Method)
	}
	if tr.Key != "" && tr.Key != raw {
		fmt.Fprintf(out, "key       %s (async; its state is the key's)\n", tr.Key)
	}
	if tr.KeyHeldBy != "" {
		fmt.Fprintf(out, "  the key's state is now that of request %s, sent later with the same key\n", tr.KeyHeldBy)
	}
	state := tr.State
	if state == "" {
		state = "(none: not yet taken by a worker)"
	}
	fmt.Fprintf(out, "state     %s\n", state)
	// since is how long after the request was made t is ("" when the
	// request, hence its time, is not known).
	since := func(t time.Time) string {
		if madeAt.IsZero() {
			return ""
		}
		return fmt.Sprintf("  +%v", t.Sub(madeAt).Round(time.Millisecond))
	}
	row := func(what string, t time.Time, extra string) {
		if !t.IsZero() {
			fmt.Fprintln(out, strings.TrimRight(fmt.Sprintf("  %-8s%s%s %s", what, stamp(t), since(t), extra), " "))
		}
	}
	by := strings.TrimSpace("by " + tr.Worker + " (attempt " + tr.Attempt + ")")
	row("claimed", tr.Claimed, by)
	if tr.PreviousWorker != "" {
		fmt.Fprintf(out, "  taken over from worker %s, which died while running it\n", tr.PreviousWorker)
	}
	if tr.Held {
		fmt.Fprintln(out, "  held: its attempts are over and its dead-letter stream is full; it waits in the retry set, is not run again, and is dead-lettered once there is room (rpr dlq ls)")
	}
	if tr.Claimed.IsZero() && tr.Worker != "" {
		row("done", tr.Done, by) // an async success keeps only its worker and attempt
	} else {
		row("done", tr.Done, "")
	}
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
	if f := tr.Finished; f != nil {
		printFinished(out, f, tr.Retention, stamp, since)
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

// printFinished writes the record a server kept of a unary call it
// answered, kept for retention.
func printFinished(out io.Writer, f *admin.TraceFinished, retention time.Duration, stamp, since func(time.Time) string) {
	outcome := fmt.Sprintf("OK, %d bytes", f.Bytes)
	if f.Code != tunnel.OK {
		outcome = fmt.Sprintf("%s: %s", f.Code, f.Message)
	}
	fmt.Fprintf(out, "finished  %s%s by worker %s: %s\n", stamp(f.Done), since(f.Done), f.Worker, outcome)
	if !f.Started.IsZero() {
		took := "under 1ms" // the record's times are in ms
		if d := f.Done.Sub(f.Started); d > 0 {
			took = d.String()
		}
		fmt.Fprintf(out, "  handler ran %s, from %s%s\n", took, stamp(f.Started), since(f.Started))
	}
	kept := ""
	if retention > 0 {
		kept = fmt.Sprintf("kept for %v (ServerOptions.Retention), ", retention)
	}
	fmt.Fprintf(out, "  record  %sexpires in %v\n", kept, f.ExpiresIn.Round(time.Millisecond))
}

// printNotFound says why Redis may know nothing of tr's request: for an
// id, what each service searched keeps of finished unary calls.
func printNotFound(out io.Writer, tr *admin.RequestTrace) {
	if tr.ByKey {
		fmt.Fprintln(out, "  Redis knows nothing of it: no async request with this key is queued, retrying or dead-lettered,")
		fmt.Fprintln(out, "  and no service has a state for it (a key's state is kept for the servers' idempotency window after")
		fmt.Fprintln(out, "  its last attempt, 24h by default); or it was never used here (check --redis and --prefix)")
		return
	}
	fmt.Fprintln(out, "  Redis knows nothing of it.")
	if len(tr.Searched) == 0 {
		fmt.Fprintln(out, "  No service is known under this prefix: check --redis and --prefix.")
		return
	}
	fmt.Fprintln(out, "  If it was a unary call that finished, what is left of it depends on its servers' retention")
	fmt.Fprintln(out, "  (tunnel.ServerOptions.Retention: how long they keep a record of each unary call they answer):")
	width := 0
	for _, s := range tr.Searched {
		width = max(width, len(s.Service))
	}
	for _, s := range tr.Searched {
		switch {
		case s.NoWorkers:
			fmt.Fprintf(out, "    %-*s  no server of it is running: what its servers kept (ServerOptions.Retention) is not known\n", width, s.Service)
		case s.Partial:
			fmt.Fprintf(out, "    %-*s  some of its servers keep them for %v, others keep none: a call of it finished longer ago than that, or one that keeps none answered it\n", width, s.Service, s.Retention)
		case s.Retention > 0:
			fmt.Fprintf(out, "    %-*s  keeps them for %v: a call of it finished longer ago than that\n", width, s.Service, s.Retention)
		default:
			fmt.Fprintf(out, "    %-*s  retention is off: a call of it finished and left nothing; set ServerOptions.Retention on its servers to keep a record\n", width, s.Service)
		}
	}
	fmt.Fprintln(out, "  Otherwise it never reached this Redis (check --redis and --prefix), or its state expired (10s after")
	fmt.Fprintln(out, "  its deadline; for async requests, the idempotency window after their last attempt).")
	fmt.Fprintln(out, "  Its spans and log lines carry the id.")
}
