package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

// payloadDumpMax is how many payload bytes show prints as a hex dump when
// it cannot decode them (the base64 line always has them all).
const payloadDumpMax = 256

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
		Args:              usageArgs(2, 2, "rpr dlq show SERVICE ID, e.g. rpr dlq show examples.orders.v1.Orders 1764434400123-0"),
		ValidArgsFunction: completeServices(&rf, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkService(args[0]); err != nil {
				return err
			}
			if err := checkID(args[1]); err != nil {
				return err
			}
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			t, err := openDLQ(ctx, rf, args[0])
			if err != nil {
				return err
			}
			defer t.rdb.Close()
			dl, err := t.queue.Get(ctx, args[1])
			if errors.Is(err, admin.ErrNoDeadLetter) {
				return failed(t.notFound(ctx, []string{args[1]}))
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

// printDeadLetter writes every field of dl.
func printDeadLetter(out io.Writer, t *dlqTarget, dl admin.DeadLetter, dec *payloadDecoder, now time.Time) {
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

func toJSON(dl admin.DeadLetter, dec *payloadDecoder) deadLetter {
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
func kindOf(dl admin.DeadLetter) string {
	switch {
	case dl.DecodeError != "":
		return "unknown"
	case dl.Async:
		return "async"
	}
	return "unary"
}

// payloadDecoder turns request payloads into JSON with the schema the
// service's servers published (as loadTarget reads it), and says why it
// cannot when Redis has none.
type payloadDecoder struct {
	target  *schemaTarget
	missing error
}

func newPayloadDecoder(ctx context.Context, t *dlqTarget) *payloadDecoder {
	files, err := t.svc.SchemaFiles(ctx)
	if errors.Is(err, admin.ErrNoSchema) {
		return &payloadDecoder{missing: fmt.Errorf("the schema of %s is not published in Redis, so the payload is shown raw (servers publish it when they start)", t.service)}
	}
	if err != nil {
		return &payloadDecoder{missing: fmt.Errorf("the schema of %s cannot be read (%v), so the payload is shown raw", t.service, err)}
	}
	sd, err := admin.ServiceInFiles(files, t.service)
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
