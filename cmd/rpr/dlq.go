package main

// rpr dlq: the operator's view of a service's dead-letter stream, on top of
// tunnel.DeadLetterQueue. The library does the work (scans, atomic replay,
// drop); this file chooses what to show and how, and guards the two
// commands that change things: replay and drop refuse to run without an
// explicit selection, drop asks before deleting, and every selection can be
// previewed with --dry-run.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rprtunnel/rpr/tunnel"
)

const (
	// dlqLsLimit is how many dead letters `rpr dlq ls` shows by default.
	dlqLsLimit = 50
	// progressMin is the smallest set replay and drop draw a progress bar
	// for: smaller ones finish before a bar is worth its flicker.
	progressMin = 100
	// minReasonWidth is the narrowest the REASON column is cut to.
	minReasonWidth = 24
	// skippedShown is how many skipped letters a replay lists by id.
	skippedShown = 20
	// payloadDumpMax is how many payload bytes show prints as a hex dump
	// when it cannot decode them (the base64 line always has them all).
	payloadDumpMax = 256
)

// confirmWait bounds how long drop waits for an answer on a stdin that is
// not a terminal (a pipe a parent never closes must not hang it); a
// variable for tests.
var confirmWait = 5 * time.Second

// describeStreams names a service's dead-letter streams in messages: the
// one of an unsharded service, or the range of a sharded one's.
func describeStreams(streams []string) string {
	switch len(streams) {
	case 0:
		return "no dead-letter stream"
	case 1:
		return streams[0]
	case 2:
		return streams[0] + " and " + streams[1]
	}
	return fmt.Sprintf("the %d streams %s … %s", len(streams), streams[0], streams[len(streams)-1])
}

// empty says that the target's dead-letter streams are empty.
func (t *dlqTarget) empty() string {
	if len(t.streams) > 1 {
		return t.key + " are empty"
	}
	return t.key + " is empty"
}

func newDlqCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, replay and drop a service's dead letters",
		Long: `dlq manages a service's dead-letter stream (rpr:v1:{pkg.Svc}:dlq, and one
per shard of a sharded service: rpr:v1:{pkg.Svc#1}:dlq, ...): the async
requests that failed their last attempt or failed permanently, and request
entries no server could decode. rpr never trims it: a dead letter stays
until it is replayed or dropped.

A dead letter is named by its entry id (the first column of "rpr dlq ls"):
its id in the stream, 1764434400123-0, prefixed with its shard for the
shards after the first of a sharded service, 2/1764434400123-0; or by its
request id. Replay queues a letter again in its shard and in the lane it
failed in (the default lane when that lane has no live server any more).

A poison message, start to finish:
  rpr dlq ls pkg.Svc                      what failed, and why
  rpr dlq show pkg.Svc 1764434400123-0    one of them, payload as JSON
  ... deploy the fix ...
  rpr dlq replay pkg.Svc --all            queue them all again
  rpr dlq drop pkg.Svc --code INVALID_ARGUMENT   give up on the rest`,
	}
	return commandGroup(cmd, "ls, show, replay or drop",
		newDlqLsCommand(), newDlqShowCommand(), newDlqReplayCommand(), newDlqDropCommand())
}

// ---- flags ----

// ageFlag is a --older-than/--newer-than value: a Go duration, or whole
// days ("2d", "1d12h"), never negative.
type ageFlag struct {
	d    time.Duration
	name string
}

func (f *ageFlag) String() string {
	if f.d == 0 {
		return "0" // unset: pflag shows no default for "0"
	}
	return f.d.String()
}

func (f *ageFlag) Type() string { return "duration" }

func (f *ageFlag) Set(s string) error {
	d, err := parseAge(s)
	switch {
	case err != nil:
		return fmt.Errorf("not a duration; use e.g. --%s 90s, 15m, 2h or 3d", f.name)
	case d < 0:
		return fmt.Errorf("must not be negative; use e.g. --%s 1h", f.name)
	}
	f.d = d
	return nil
}

// parseAge reads a duration as time.ParseDuration does, plus a leading
// whole number of days ("3d", "1d12h").
func parseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	neg := strings.HasPrefix(s, "-")
	body := strings.TrimPrefix(s, "-")
	var days time.Duration
	if i := strings.IndexByte(body, 'd'); i > 0 {
		n, err := strconv.Atoi(body[:i])
		if err != nil {
			return 0, err
		}
		days, body = time.Duration(n)*24*time.Hour, body[i+1:]
	}
	var rest time.Duration
	if body != "" || days == 0 {
		var err error
		if rest, err = time.ParseDuration(body); err != nil {
			return 0, err
		}
	}
	if neg {
		return -(days + rest), nil
	}
	return days + rest, nil
}

// codeFlag is a --code value: a status code by name (any case, "-" for
// "_") or number; OK is refused, since no dead letter failed with it.
type codeFlag struct {
	code tunnel.Code
	set  bool
}

func (f *codeFlag) String() string {
	if !f.set {
		return ""
	}
	return f.code.String()
}

func (f *codeFlag) Type() string { return "code" }

func (f *codeFlag) Set(s string) error {
	name := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
	code, ok := tunnel.ParseCode(name)
	switch {
	case !ok:
		return errors.New("not a status code; use a name such as UNAVAILABLE, DEADLINE_EXCEEDED or INVALID_ARGUMENT, or its number, e.g. --code 14")
	case code == tunnel.OK:
		return errors.New("no dead letter failed with OK; use a failure code such as --code UNAVAILABLE")
	}
	f.code, f.set = code, true
	return nil
}

// limitFlag is a --limit value: a count, 0 for no limit.
type limitFlag struct{ n int }

func (f *limitFlag) String() string { return strconv.Itoa(f.n) }
func (f *limitFlag) Type() string   { return "int" }

func (f *limitFlag) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return errors.New("want a number of dead letters, 0 for no limit, e.g. --limit 100")
	}
	f.n = n
	return nil
}

// dlqSelection holds the filter flags ls, replay and drop share.
type dlqSelection struct {
	method string
	code   codeFlag
	older  ageFlag
	newer  ageFlag
	limit  limitFlag
}

func (s *dlqSelection) register(cmd *cobra.Command, limit int, limitHelp string) {
	s.older.name, s.newer.name, s.limit.n = "older-than", "newer-than", limit
	f := cmd.Flags()
	f.StringVar(&s.method, "method", "", `only this method: its short name ("Charge") or full name ("pkg.Svc/Charge")`)
	f.Var(&s.code, "code", "only letters whose last attempt failed with this code (UNAVAILABLE, INTERNAL, 14...)")
	f.Var(&s.older, "older-than", "only letters dead-lettered longer ago than this (90s, 15m, 2h, 3d)")
	f.Var(&s.newer, "newer-than", "only letters dead-lettered within this (90s, 15m, 2h, 3d)")
	f.Var(&s.limit, "limit", limitHelp)
}

// filtered reports whether any filter flag is set.
func (s *dlqSelection) filtered() bool {
	return s.method != "" || s.code.set || s.older.d > 0 || s.newer.d > 0
}

// filter returns the library filter, or an exit-2 error when the flags
// cannot select anything.
func (s *dlqSelection) filter() (tunnel.DeadLetterFilter, error) {
	if strings.Count(s.method, "/") > 1 || strings.HasSuffix(s.method, "/") {
		return tunnel.DeadLetterFilter{}, exitError{code: 2, cause: fmt.Errorf("--method %q: name a method as Charge or pkg.Svc/Charge", s.method)}
	}
	if s.older.d > 0 && s.newer.d > 0 && s.older.d >= s.newer.d {
		return tunnel.DeadLetterFilter{}, exitError{code: 2, cause: fmt.Errorf(
			"--older-than %v and --newer-than %v select nothing: for a window, --older-than must be the shorter, e.g. --older-than 10m --newer-than 2h",
			s.older.d, s.newer.d)}
	}
	return tunnel.DeadLetterFilter{Method: s.method, Code: s.code.code, OlderThan: s.older.d, NewerThan: s.newer.d}, nil
}

// describe renders the filters as flags, for messages.
func (s *dlqSelection) describe() string {
	var parts []string
	if s.method != "" {
		parts = append(parts, "--method "+s.method)
	}
	if s.code.set {
		parts = append(parts, "--code "+s.code.code.String())
	}
	if s.older.d > 0 {
		parts = append(parts, "--older-than "+s.older.d.String())
	}
	if s.newer.d > 0 {
		parts = append(parts, "--newer-than "+s.newer.d.String())
	}
	return strings.Join(parts, " ")
}

// dlqTarget is what every dlq command starts from: Redis, the service and
// its dead-letter queue.
type dlqTarget struct {
	rdb     redis.UniversalClient
	prefix  string
	service string
	streams []string // the dead-letter streams, one per shard
	key     string   // the streams, as messages name them
	queue   *tunnel.DeadLetterQueue
}

// checkService refuses a SERVICE argument that cannot be a service name.
func checkService(arg string) error {
	switch {
	case arg == "":
		return exitError{code: 2, cause: errors.New("name the service, e.g. rpr dlq ls examples.greeter.v1.Greeter")}
	case strings.Contains(arg, "/"):
		svc, method, _ := strings.Cut(arg, "/")
		return exitError{code: 2, cause: fmt.Errorf("%q names a method; name the service and filter by method: %s --method %s", arg, svc, method)}
	case strings.ContainsAny(arg, "{} \t"):
		return exitError{code: 2, cause: fmt.Errorf("%q is not a service name; write pkg.Service, e.g. examples.greeter.v1.Greeter", arg)}
	}
	return nil
}

func openDLQ(ctx context.Context, rf redisFlags, service string) (*dlqTarget, error) {
	rdb, err := rf.open(ctx)
	if err != nil {
		return nil, err
	}
	queue := tunnel.NewDeadLetterQueue(rdb, rf.prefix, service)
	streams, err := queue.Streams(ctx)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &dlqTarget{
		rdb: rdb, prefix: rf.prefix, service: service, streams: streams, key: describeStreams(streams),
		queue: queue,
	}, nil
}

// redisNow is Redis's clock, which the library's age filters use too, so
// that ages agree with them whatever this host's clock says.
func (t *dlqTarget) redisNow(ctx context.Context) time.Time {
	now, err := t.rdb.Time(ctx).Result()
	if err != nil {
		return time.Now()
	}
	return now
}

// unknownServiceHint says, when the service is not known under the prefix,
// that its name may be wrong; "" otherwise.
func (t *dlqTarget) unknownServiceHint(ctx context.Context) string {
	return unknownServiceHint(ctx, t.rdb, t.prefix, t.service)
}

// unknownServiceHint says, when service is not known under prefix, that
// its name may be wrong; "" otherwise.
func unknownServiceHint(ctx context.Context, rdb redis.UniversalClient, prefix, service string) string {
	names, err := tunnel.ListServices(ctx, rdb, prefix)
	if err != nil || slices.Contains(names, service) {
		return ""
	}
	hint := fmt.Sprintf("no service %s is known under prefix %q (no published schema or worker heartbeats): check the name", service, prefix)
	if len(names) > 0 {
		hint += "; known: " + strings.Join(names, ", ")
	}
	return hint
}

// ---- ls ----

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
		Args: dlqArgs(1, 1, "rpr dlq ls SERVICE, e.g. rpr dlq ls examples.orders.v1.Orders"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkService(args[0]); err != nil {
				return err
			}
			if output != "table" && output != "json" {
				return exitError{code: 2, cause: fmt.Errorf("-o %q: want table or json, e.g. -o json", output)}
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

func runDlqLs(ctx context.Context, out io.Writer, t *dlqTarget, sel *dlqSelection, filter tunnel.DeadLetterFilter, asJSON bool) error {
	total, err := t.queue.Len(ctx)
	if err != nil {
		return err
	}
	var letters []tunnel.DeadLetter
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
	now := t.redisNow(ctx)
	if asJSON {
		dec := newPayloadDecoder(ctx, t)
		doc := struct {
			Service string `json:"service"`
			// DLQ is shard 0's stream; Streams lists every shard's.
			DLQ         string       `json:"dlq"`
			Streams     []string     `json:"dlq_streams"`
			Total       int64        `json:"total"`
			Matched     int64        `json:"matched"`
			Shown       int          `json:"shown"`
			DeadLetters []deadLetter `json:"dead_letters"`
		}{Service: t.service, DLQ: t.streams[0], Streams: t.streams, Total: total, Matched: matched, Shown: len(letters), DeadLetters: []deadLetter{}}
		for _, dl := range letters {
			doc.DeadLetters = append(doc.DeadLetters, toJSON(dl, dec))
		}
		return writeJSON(out, doc)
	}
	switch {
	case total == 0:
		fmt.Fprintf(out, "%s has no dead letters (%s)\n", t.service, t.empty())
		if hint := t.unknownServiceHint(ctx); hint != "" {
			fmt.Fprintf(out, "note: %s\n", hint)
		}
		return nil
	case len(letters) == 0:
		fmt.Fprintf(out, "none of the %d dead letters of %s match %s\n", total, t.service, sel.describe())
		return nil
	}
	printDeadLetterTable(out, letters, now, outputWidth(out))
	fmt.Fprintln(out, lsFooter(t.service, len(letters), total, matched, sel.filtered()))
	return nil
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

// count is "1 dead letter", "3 dead letters" (plural is in ls.go).
func count(n int, noun string) string {
	return strconv.Itoa(n) + " " + noun + plural(n)
}

// dlqColumns are the columns of `rpr dlq ls`; a LANE column follows
// METHOD when some letter was dead-lettered in a lane other than the
// default.
var dlqColumns = []string{"ENTRY", "REQUEST", "METHOD", "CODE", "ATTEMPTS", "AGE", "REASON"}

// printDeadLetterTable writes letters as an aligned table; width, when
// positive, is the line width the REASON column is cut to fit.
func printDeadLetterTable(out io.Writer, letters []tunnel.DeadLetter, now time.Time, width int) {
	columns := dlqColumns
	withLane := slices.ContainsFunc(letters, func(dl tunnel.DeadLetter) bool { return dl.Lane != tunnel.DefaultLane })
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
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(columns, "\t"))
	for _, r := range rows {
		r[len(r)-1] = truncate(r[len(r)-1], reasonWidth)
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
}

// whyText says in one line why a letter is here: the reason, then the last
// attempt's error message when it adds something.
func whyText(dl tunnel.DeadLetter) string {
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

// truncate cuts s to width runes, ending in "…"; width 0 means no limit.
func truncate(s string, width int) string {
	if width <= 0 || utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
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

func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// ---- JSON ----

// deadLetter is a dead letter as `-o json` prints it.
type deadLetter struct {
	EntryID   string              `json:"entry_id"`
	Shard     int                 `json:"shard"`
	Lane      string              `json:"lane"`
	RequestID string              `json:"request_id,omitempty"`
	Key       string              `json:"key,omitempty"`
	Method    string              `json:"method,omitempty"`
	Kind      string              `json:"kind"`
	Code      string              `json:"code,omitempty"`
	Error     string              `json:"error,omitempty"`
	Reason    string              `json:"reason,omitempty"`
	Attempts  int                 `json:"attempts"`
	Replays   int                 `json:"replays"`
	Enqueued  *time.Time          `json:"enqueued,omitempty"`
	Failed    *time.Time          `json:"failed,omitempty"`
	Worker    string              `json:"worker,omitempty"`
	Header    map[string][]string `json:"header,omitempty"`
	// Payload is the payload as JSON, when the published schema decodes it.
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadType   string          `json:"payload_type,omitempty"`
	PayloadBase64 []byte          `json:"payload_base64,omitempty"`
	PayloadNote   string          `json:"payload_note,omitempty"`
	DecodeError   string          `json:"decode_error,omitempty"`
}

func toJSON(dl tunnel.DeadLetter, dec *payloadDecoder) deadLetter {
	j := deadLetter{
		EntryID: dl.EntryID, Shard: dl.Shard, Lane: dl.Lane, RequestID: dl.RequestID, Key: dl.Key, Method: dl.Method, Kind: kindOf(dl),
		Error: dl.Error, Reason: dl.Reason, Attempts: dl.Attempts, Replays: dl.Replays,
		Worker: dl.Worker, Header: dl.Header, PayloadBase64: dl.Payload, DecodeError: dl.DecodeError,
	}
	if dl.Code != tunnel.OK {
		j.Code = dl.Code.String()
	}
	if !dl.Failed.IsZero() {
		t := dl.Failed.UTC()
		j.Failed = &t
	}
	if !dl.Enqueued.IsZero() {
		t := dl.Enqueued.UTC()
		j.Enqueued = &t
	}
	if dl.DecodeError == "" {
		typ, text, err := dec.decode(dl.Method, dl.Payload)
		if err != nil {
			j.PayloadNote = err.Error()
		} else {
			j.Payload, j.PayloadType = text, typ
		}
	}
	return j
}

// kindOf is "async", "unary" or "unknown" (undecodable).
func kindOf(dl tunnel.DeadLetter) string {
	switch {
	case dl.DecodeError != "":
		return "unknown"
	case dl.Async:
		return "async"
	}
	return "unary"
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// payloadDecoder turns request payloads into JSON with the schema the
// service's servers published (see describe.go), and says why it cannot
// when Redis has none.
type payloadDecoder struct {
	target  *schemaTarget
	missing error
}

func newPayloadDecoder(ctx context.Context, t *dlqTarget) *payloadDecoder {
	files, err := tunnel.LoadSchemaFiles(ctx, t.rdb, t.prefix, t.service)
	if errors.Is(err, tunnel.ErrNoSchema) {
		return &payloadDecoder{missing: fmt.Errorf("the schema of %s is not published in Redis, so the payload is shown raw (servers publish it when they start)", t.service)}
	}
	if err != nil {
		return &payloadDecoder{missing: fmt.Errorf("the schema of %s cannot be read (%v), so the payload is shown raw", t.service, err)}
	}
	sd, err := tunnel.ServiceInFiles(files, t.service)
	if err != nil {
		return &payloadDecoder{missing: fmt.Errorf("%v; the payload is shown raw", err)}
	}
	return &payloadDecoder{target: &schemaTarget{files: files, types: dynamicpb.NewTypes(files), service: sd}}
}

// decode returns the payload's message type and its JSON, indented.
func (d *payloadDecoder) decode(method string, payload []byte) (string, json.RawMessage, error) {
	if d.target == nil {
		return "", nil, d.missing
	}
	md := d.target.service.Methods().ByName(protoreflect.Name(shortMethod(method)))
	if md == nil {
		return "", nil, fmt.Errorf("the published schema of %s has no method %q (changed since?), so the payload is shown raw", d.target.service.FullName(), shortMethod(method))
	}
	msg := dynamicpb.NewMessage(md.Input())
	if err := (proto.UnmarshalOptions{Resolver: d.target.types}).Unmarshal(payload, msg); err != nil {
		return "", nil, fmt.Errorf("the payload is not a valid %s (%v), so it is shown raw", md.Input().FullName(), err)
	}
	text, err := protojson.MarshalOptions{Resolver: d.target.types}.Marshal(msg)
	if err != nil {
		return "", nil, fmt.Errorf("the payload cannot be shown as JSON (%v), so it is shown raw", err)
	}
	var indented bytes.Buffer
	// protojson varies its spacing on purpose; json.Indent makes it stable.
	if err := json.Indent(&indented, text, "", "  "); err != nil {
		return "", nil, err
	}
	return string(md.Input().FullName()), indented.Bytes(), nil
}

// ---- show ----

func newDlqShowCommand() *cobra.Command {
	var rf redisFlags
	var output string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "show SERVICE ID",
		Short: "Show every field of one dead letter, its payload as JSON",
		Long: `show prints one dead letter, found by its entry id (the first column of
"rpr dlq ls") or its request id: ids, its shard (of a sharded service) and
lane, idempotency key, method, kind, the last attempt's code and error,
why it was dead-lettered, attempts and earlier replays, when it was
enqueued and when it failed, the worker, the request's metadata, and its
payload as JSON, decoded with the schema the service's servers published
(raw bytes, in hex and base64, when Redis has no schema).

Exit status: 0 when shown; 1 when the DLQ has no such letter; 2 on bad input.`,
		Example: `  rpr dlq show examples.orders.v1.Orders 1764434400123-0
  rpr dlq show examples.orders.v1.Orders 20261129-ORD1-1764434400123-K7P2QXM4RT -o json`,
		Args: dlqArgs(2, 2, "rpr dlq show SERVICE ID, e.g. rpr dlq show examples.orders.v1.Orders 1764434400123-0"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkService(args[0]); err != nil {
				return err
			}
			if err := checkID(args[1]); err != nil {
				return err
			}
			if output != "text" && output != "json" {
				return exitError{code: 2, cause: fmt.Errorf("-o %q: want text or json, e.g. -o json", output)}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			t, err := openDLQ(ctx, rf, args[0])
			if err != nil {
				return err
			}
			defer t.rdb.Close()
			dl, err := t.queue.Get(ctx, args[1])
			if errors.Is(err, tunnel.ErrNoDeadLetter) {
				return exitError{code: 1, cause: t.notFound(ctx, []string{args[1]})}
			}
			if err != nil {
				return err
			}
			dec := newPayloadDecoder(ctx, t)
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), toJSON(dl, dec))
			}
			printDeadLetter(cmd.OutOrStdout(), t, dl, dec, t.redisNow(ctx))
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "give up on Redis after this long")
	return cmd
}

// notFound is the error for ids the DLQ does not have.
func (t *dlqTarget) notFound(ctx context.Context, ids []string) error {
	what := "no dead letter " + ids[0]
	if len(ids) > 1 {
		what = "no dead letters " + strings.Join(ids, ", ")
	}
	msg := fmt.Sprintf("%s in the DLQ of %s (%s): replayed or dropped already, or a mistyped id; list them with: rpr dlq ls %s", what, t.service, t.key, t.service)
	if hint := t.unknownServiceHint(ctx); hint != "" {
		msg += "\nnote: " + hint
	}
	return errors.New(msg)
}

// isEntryID reports whether id is a dead letter's entry id ("1764434400123-0"
// or, in shard 2 of a sharded service, "2/1764434400123-0").
func isEntryID(id string) bool {
	_, _, err := tunnel.ParseDeadLetterID(id)
	return err == nil
}

// checkID refuses an ID that is neither an entry id nor a request id.
func checkID(id string) error {
	if isEntryID(id) {
		return nil
	}
	if _, err := tunnel.ParseRequestID(id); err == nil {
		return nil
	}
	if strings.Contains(id, "/") {
		// Meant as an entry id of a shard: say what is wrong with it.
		_, _, err := tunnel.ParseDeadLetterID(id)
		return exitError{code: 2, cause: err}
	}
	return exitError{code: 2, cause: fmt.Errorf("%q is neither an entry id (e.g. 1764434400123-0, or 2/1764434400123-0 in shard 2 of a sharded service: the first column of \"rpr dlq ls\") nor a request id (e.g. 20261129-ORD1-1764434400123-K7P2QXM4RT)", id)}
}

// printDeadLetter writes every field of dl.
func printDeadLetter(out io.Writer, t *dlqTarget, dl tunnel.DeadLetter, dec *payloadDecoder, now time.Time) {
	stamp := func(at time.Time) string {
		if at.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%s (%s ago)", at.UTC().Format("2006-01-02T15:04:05.000Z07:00"), formatAge(max(now.Sub(at), 0)))
	}
	row := func(label, value string) { fmt.Fprintf(out, "%-10s %s\n", label, value) }
	row("entry", dl.EntryID+" in "+dl.Stream)
	if len(t.streams) > 1 {
		row("shard", fmt.Sprintf("%d of %d", dl.Shard, len(t.streams)))
	}
	row("lane", dl.Lane)
	row("request", orDash(dl.RequestID))
	key := orDash(dl.Key)
	if dl.Key != "" && dl.Key == dl.RequestID {
		key += " (the request id: no idempotency key was set)"
	}
	row("key", key)
	row("method", orDash(dl.Method))
	switch kindOf(dl) {
	case "async":
		row("kind", "async (replayable)")
	case "unary":
		row("kind", "unary (not replayable: its caller stopped waiting long ago)")
	default:
		row("kind", "unknown: the envelope does not decode (not replayable; drop it)")
	}
	if dl.Code != tunnel.OK {
		row("code", fmt.Sprintf("%s (%d)", dl.Code, uint32(dl.Code)))
	} else {
		row("code", "-")
	}
	row("error", orDash(dl.Error))
	row("reason", orDash(dl.Reason))
	if dl.DecodeError != "" {
		row("envelope", "does not decode: "+dl.DecodeError)
	}
	row("attempts", strconv.Itoa(dl.Attempts))
	row("replays", strconv.Itoa(dl.Replays))
	row("enqueued", stamp(dl.Enqueued))
	row("failed", stamp(dl.Failed))
	row("worker", orDash(dl.Worker))
	if len(dl.Header) == 0 {
		row("metadata", "-")
	} else {
		keys := make([]string, 0, len(dl.Header))
		for k := range dl.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		label := "metadata"
		for _, k := range keys {
			for _, v := range dl.Header[k] {
				row(label, k+": "+v)
				label = ""
			}
		}
	}
	if dl.DecodeError != "" {
		return
	}
	typ, text, err := dec.decode(dl.Method, dl.Payload)
	if err == nil {
		row("payload", fmt.Sprintf("%s, %s", typ, count(len(dl.Payload), "byte")))
		for line := range strings.SplitSeq(string(text), "\n") {
			fmt.Fprintf(out, "  %s\n", line)
		}
		return
	}
	row("payload", count(len(dl.Payload), "byte")+"; "+err.Error())
	if len(dl.Payload) == 0 {
		return
	}
	dump := dl.Payload
	if len(dump) > payloadDumpMax {
		dump = dump[:payloadDumpMax]
	}
	for line := range strings.SplitSeq(strings.TrimRight(hex.Dump(dump), "\n"), "\n") {
		fmt.Fprintf(out, "  %s\n", line)
	}
	if len(dl.Payload) > payloadDumpMax {
		fmt.Fprintf(out, "  … %d more bytes\n", len(dl.Payload)-payloadDumpMax)
	}
	row("base64", base64.StdEncoding.EncodeToString(dl.Payload))
}

// ---- replay and drop ----

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
func (f *selectFlags) check(cmd *cobra.Command, verb string, ids []string) (tunnel.DeadLetterFilter, error) {
	filter, err := f.sel.filter()
	if err != nil {
		return filter, err
	}
	switch {
	case len(ids) > 0 && (f.all || f.sel.filtered()):
		return filter, exitError{code: 2, cause: fmt.Errorf("pass either IDs or a selection (--all or filters), not both")}
	case len(ids) > 0 && cmd.Flags().Changed("limit"):
		return filter, exitError{code: 2, cause: fmt.Errorf("--limit applies to --all and filters, not to IDs")}
	case len(ids) == 0 && !f.all && !f.sel.filtered():
		return filter, exitError{code: 2, cause: fmt.Errorf(
			"say which dead letters to %s: pass IDs (from \"rpr dlq ls %s\"), a filter (--method, --code, --older-than, --newer-than) or --all",
			verb, cmd.Flags().Arg(0))}
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
func (f *selectFlags) resolve(ctx context.Context, t *dlqTarget, filter tunnel.DeadLetterFilter, ids []string) ([]tunnel.DeadLetter, error) {
	if len(ids) == 0 {
		return t.queue.List(ctx, filter, f.sel.limit.n)
	}
	var out []tunnel.DeadLetter
	var missing []string
	seen := map[string]bool{}
	var byRequest map[string]tunnel.DeadLetter // built on the first request id: one scan for all
	for _, id := range ids {
		var dl tunnel.DeadLetter
		var ok bool
		if isEntryID(id) {
			got, err := t.queue.Get(ctx, id)
			switch {
			case errors.Is(err, tunnel.ErrNoDeadLetter):
			case err != nil:
				return nil, err
			default:
				dl, ok = got, true
			}
		} else {
			if byRequest == nil {
				all, err := t.queue.List(ctx, tunnel.DeadLetterFilter{}, 0)
				if err != nil {
					return nil, err
				}
				byRequest = map[string]tunnel.DeadLetter{}
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
		return nil, exitError{code: 1, cause: fmt.Errorf("%w; nothing changed", t.notFound(ctx, missing))}
	}
	return out, nil
}

// selected checks the arguments of replay or drop (verb), opens the DLQ
// and returns the dead letters they select, to act on. When none is
// selected, or with --dry-run, it reports that itself and returns no
// letters. A non-nil t is open even on error: the caller closes t.rdb.
func (f *selectFlags) selected(cmd *cobra.Command, args []string, verb string) (t *dlqTarget, letters []tunnel.DeadLetter, err error) {
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
		nothingSelected(out, t, &f.sel, verb)
		return t, nil, nil
	case f.dryRun:
		fmt.Fprintf(out, "would %s %s of %s (dry run: nothing changed):\n", verb, count(len(letters), "dead letter"), t.service)
		printBreakdown(out, letters)
		return t, nil, nil
	}
	return t, letters, nil
}

// nothingSelected says that a filter or --all selected no dead letter.
func nothingSelected(out io.Writer, t *dlqTarget, sel *dlqSelection, verb string) {
	if sel.filtered() {
		fmt.Fprintf(out, "nothing to %s: no dead letter of %s matches %s\n", verb, t.service, sel.describe())
		return
	}
	fmt.Fprintf(out, "nothing to %s: %s has no dead letters (%s)\n", verb, t.service, t.empty())
}

// printBreakdown summarizes letters by method and code, largest group first.
func printBreakdown(out io.Writer, letters []tunnel.DeadLetter) {
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
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, g := range groups {
		fmt.Fprintf(tw, "  %*d\t%s\t%s\n", countWidth, g.n, g.method, g.code)
	}
	_ = tw.Flush()
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
		Args: dlqArgs(1, -1, "rpr dlq replay SERVICE (ID... | --all | filters), e.g. rpr dlq replay examples.orders.v1.Orders --all"),
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
				if h, err := tunnel.CheckHealth(ctx, t.rdb, t.prefix, t.service); err == nil && !h.Serving() {
					fmt.Fprintf(out, "note: %s has no live worker: the replayed requests wait in its queue until one starts\n", t.service)
				}
			}
			if len(ids) > 0 && len(res.Skipped) > 0 {
				return exitError{code: 1}
			}
			return nil
		},
	}
	f.register(cmd, "replay")
	return cmd
}

// printReplay summarizes a replay.
func printReplay(out io.Writer, service string, selected int, res tunnel.ReplayResult) {
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
		Args: dlqArgs(1, -1, "rpr dlq drop SERVICE (ID... | --all | filters), e.g. rpr dlq drop examples.orders.v1.Orders 1764434400123-0"),
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
					return exitError{code: 1, cause: errors.New("not confirmed: nothing dropped (answer y, or pass --yes)")}
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

// dlqArgs checks the number of arguments (max -1: no limit), with usage
// in the message and exit status 2.
func dlqArgs(minArgs, maxArgs int, usage string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < minArgs || (maxArgs >= 0 && len(args) > maxArgs) {
			return exitError{code: 2, cause: fmt.Errorf("usage: %s", usage)}
		}
		return nil
	}
}
