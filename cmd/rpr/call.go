package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/rprtunnel/rpr/tunnel"
)

// callDefaultTimeout bounds a call whose method sets no timeout and whose
// --timeout is not given: the library's default, so that rpr call behaves
// as a program's call of the method does.
const callDefaultTimeout = tunnel.DefaultCallTimeout

func newCallCommand() *cobra.Command {
	var rf redisFlags
	var headers []string
	var caller callerFlags
	var timeout, delay time.Duration
	var idempotencyKey string
	var emitDefaults, verbose bool
	cmd := &cobra.Command{
		Use:   "call pkg.Service/Method [JSON | @file | -]",
		Short: "Call a method with JSON in and JSON out, using the schema its servers published",
		Long: `call invokes one method through Redis, like grpcurl: the request is JSON (the
protobuf JSON mapping of the method's input message), given inline, read
from a file (@file) or from stdin (-); it defaults to {}. The response is
printed as JSON on stdout. The message types come from the schema the
service's servers published to Redis, so no .proto file or generated code
is needed.

The deadline is --timeout, else the method's (rpr.v1.method) or
(rpr.v1.service) timeout, else ` + callDefaultTimeout.String() + ` (tunnel.DefaultCallTimeout, as for
a program's calls).

A server-streaming method takes its one request the same way and prints
each reply as one line of JSON as it arrives, until the server ends the
stream (or --timeout, or Ctrl-C). A client-streaming or bidirectional
method reads its requests as JSON lines, one request per line, from stdin
(or - or @file) and sends each as it is read; it prints the one reply
(client streaming) or each reply as it arrives (bidi). Without --timeout
a stream has no deadline; only the wait for a server to take it is
bounded (` + callDefaultTimeout.String() + `).

An async method ((rpr.v1.method).async) is enqueued, not waited for: call
returns as soon as the request is durably in Redis and prints its receipt
as JSON (request_id, idempotency_key, process_at). A server runs it later and
retries it under the method's retry policy; --timeout then limits each
attempt of the handler. --idempotency-key deduplicates (at most one request
with a key succeeds), --delay schedules the request for later; both apply
to async methods only.

Exit status: 0 when the call succeeds (or an async request is queued); 1
when it fails (its code, message and details go to stderr) or Redis knows
no such service, schema or method; 2 when it cannot be made (Redis
unreachable, a request that does not match the input message, flags that
do not apply to the method).`,
		Example: `  rpr call examples.greeter.v1.Greeter/SayHello '{"name": "Ada"}'
  rpr call -H tenant:acme --timeout 2s examples.greeter.v1.Greeter/SayHello @req.json
  echo '{"name": "Ada"}' | rpr call examples.greeter.v1.Greeter/SayHello -
  rpr call --idempotency-key order-42 --delay 5m shop.v1.Orders/ShipOrder '{"id": "42"}'
  rpr call examples.greeter.v1.Greeter/Countdown '{"from": 3}'          # one JSON line per reply
  printf '{"text":"hi"}\n{"text":"there"}\n' | rpr call examples.greeter.v1.Greeter/Chat -`,
		Args:              usageArgs(1, 2, "rpr call pkg.Service/Method [JSON | @file | -], e.g. rpr call examples.greeter.v1.Greeter/SayHello '{\"name\": \"Ada\"}'"),
		ValidArgsFunction: completePatterns(&rf, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			input := "" // {} for one request; stdin for a stream of them
			if len(args) == 2 {
				input = args[1]
			}
			return runCall(cmd, rf, args[0], input, callFlags{
				caller:  caller,
				headers: headers, timeout: timeout, emitDefaults: emitDefaults, verbose: verbose,
				idempotencyKey: idempotencyKey, delay: delay,
				asyncFlagsSet: cmd.Flags().Changed("idempotency-key") || cmd.Flags().Changed("delay"),
			})
		},
	}
	rf.register(cmd)
	cmd.Flags().StringArrayVarP(&headers, "header", "H", nil, "request metadata as key:value (repeatable)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "deadline of the call (default: the method's timeout, else "+callDefaultTimeout.String()+"); for an async method, the time limit of each attempt of its handler")
	cmd.Flags().BoolVar(&emitDefaults, "emit-defaults", false, "print response fields that hold their zero value")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "print the request id, response headers and trailers to stderr")
	cmd.Flags().StringVar(&idempotencyKey, "idempotency-key", "", "async methods only: key the request is deduplicated by (default: its request id)")
	cmd.Flags().DurationVar(&delay, "delay", 0, "async methods only: run the request this long from now instead of at once")
	caller.register(cmd.Flags())
	return cmd
}

type callFlags struct {
	caller       callerFlags
	headers      []string
	timeout      time.Duration
	emitDefaults bool
	verbose      bool
	// Async methods only.
	idempotencyKey string
	delay          time.Duration
	asyncFlagsSet  bool // --idempotency-key or --delay was given
}

func runCall(cmd *cobra.Command, rf redisFlags, targetArg, input string, flags callFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	header, err := parseHeaders(flags.headers)
	if err != nil {
		return badInput(err)
	}
	creds, err := flags.caller.credentials()
	if err != nil {
		return badInput(err)
	}

	setupCtx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
	defer cancel()
	rdb, err := rf.open(setupCtx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	target, err := loadTarget(setupCtx, rf.handle(rdb), rf.url, targetArg)
	if err != nil {
		return err
	}
	if target.method == nil {
		return badInput(fmt.Errorf("name a method to call, as %s/Method; %s has: %s",
			target.service.FullName(), target.service.FullName(), strings.Join(methodNames(target.service), ", ")))
	}
	method, err := tunnel.MethodDescFor(target.method)
	if err != nil {
		return badInput(err)
	}
	if err := checkAsyncFlags(method, flags); err != nil {
		return badInput(err)
	}
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{
		Prefix:         rf.prefix,
		DefaultTimeout: callDefaultTimeout,
		Logger:         slog.New(slog.DiscardHandler),
		Credentials:    creds,
	})
	if err != nil {
		return badInput(err)
	}
	defer client.Close()
	if method.IsStreaming() {
		return runStreamCall(cmd, client, method, target, input, header, flags)
	}
	req, err := readRequest(cmd.InOrStdin(), input, target)
	if err != nil {
		return badInput(err)
	}
	if method.Async {
		return runEnqueue(cmd, client, method, req, header, flags, target.types)
	}
	var rid string
	var respHeader, trailer tunnel.Metadata
	opts := append(callOptions(&rid, header, flags), tunnel.WithResponseHeader(&respHeader), tunnel.WithTrailer(&trailer))
	reply := dynamicpb.NewMessage(target.method.Output())
	callErr := client.Invoke(cmd.Context(), method, req, reply, opts...)
	if flags.verbose {
		fmt.Fprintf(stderr, "request id: %s\n", rid)
		printMetadata(stderr, "response header", respHeader)
		printMetadata(stderr, "trailer", trailer)
	}
	if callErr != nil {
		printCallError(stderr, method.FullMethod(), rid, callErr, target.types)
		return exitError{code: exitFailed}
	}
	text, err := protojson.MarshalOptions{Resolver: target.types, EmitUnpopulated: flags.emitDefaults}.Marshal(reply)
	if err != nil {
		return fmt.Errorf("call succeeded but its response cannot be shown as JSON: %w", err)
	}
	var indented bytes.Buffer
	// protojson varies its spacing on purpose; json.Indent makes it stable.
	if err := json.Indent(&indented, text, "", "  "); err != nil {
		return fmt.Errorf("call succeeded but its response cannot be shown as JSON: %w", err)
	}
	indented.WriteByte('\n')
	_, err = stdout.Write(indented.Bytes())
	return err
}

// callOptions are the options of a call and of an enqueue alike: capture
// the request id into rid, the -H headers, and --timeout when given.
func callOptions(rid *string, header [][2]string, flags callFlags) []tunnel.CallOption {
	opts := []tunnel.CallOption{tunnel.CaptureRequestID(rid)}
	for _, kv := range header {
		opts = append(opts, tunnel.WithHeader(kv[0], kv[1]))
	}
	if flags.timeout > 0 {
		opts = append(opts, tunnel.WithTimeout(flags.timeout))
	}
	return opts
}

// checkAsyncFlags refuses flags that do not apply to the method.
func checkAsyncFlags(method *tunnel.MethodDesc, flags callFlags) error {
	if !method.Async {
		if flags.asyncFlagsSet {
			return fmt.Errorf("--idempotency-key and --delay apply to async methods only; %s is a unary method (it is answered, not queued)", method.FullMethod())
		}
		return nil
	}
	if flags.delay < 0 {
		return fmt.Errorf("--delay %v is negative; give a positive duration such as 30s, or leave it out to run the request at once", flags.delay)
	}
	return nil
}

// runEnqueue sends one request of an async method and prints its receipt
// as JSON: nobody waits for the handler, so there is no response to show.
func runEnqueue(cmd *cobra.Command, client *tunnel.Client, method *tunnel.MethodDesc, req proto.Message, header [][2]string, flags callFlags, types *dynamicpb.Types) error {
	var rid string
	// --timeout is the time limit of each attempt of the handler.
	opts := callOptions(&rid, header, flags)
	if flags.idempotencyKey != "" {
		opts = append(opts, tunnel.WithIdempotencyKey(flags.idempotencyKey))
	}
	if flags.delay > 0 {
		opts = append(opts, tunnel.WithDelay(flags.delay))
	}
	// Enqueueing waits for Redis only; bound it as a unary call is bounded
	// by default.
	ctx, cancel := context.WithTimeout(cmd.Context(), callDefaultTimeout)
	defer cancel()
	receipt, err := client.Enqueue(ctx, method, req, opts...)
	if flags.verbose {
		fmt.Fprintf(cmd.ErrOrStderr(), "request id: %s\n", rid)
	}
	if err != nil {
		printCallError(cmd.ErrOrStderr(), method.FullMethod(), rid, err, types)
		return exitError{code: exitFailed}
	}
	text, err := json.MarshalIndent(struct {
		RequestID      string `json:"request_id"`
		IdempotencyKey string `json:"idempotency_key"`
		ProcessAt      string `json:"process_at"`
	}{receipt.RequestID, receipt.IdempotencyKey, receipt.ProcessAt.UTC().Format(time.RFC3339Nano)}, "", "  ")
	if err != nil {
		return fmt.Errorf("request queued as %s but its receipt cannot be shown as JSON: %w", receipt.RequestID, err)
	}
	_, err = cmd.OutOrStdout().Write(append(text, '\n'))
	return err
}

// parseHeaders reads -H key:value flags.
func parseHeaders(flags []string) ([][2]string, error) {
	var out [][2]string
	for _, h := range flags {
		key, value, ok := strings.Cut(h, ":")
		key = strings.TrimSpace(key)
		if !ok || key == "" {
			return nil, fmt.Errorf("header %q: want key:value, e.g. -H tenant:acme", h)
		}
		out = append(out, [2]string{key, strings.TrimSpace(value)})
	}
	return out, nil
}

// readRequest builds the method's input message from JSON given inline, as
// @file or as - (stdin), with the schema's types only.
func readRequest(stdin io.Reader, input string, t *schemaTarget) (proto.Message, error) {
	in := t.method.Input()
	var data []byte
	var from string
	switch {
	case input == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("read the request from stdin: %w", err)
		}
		data, from = b, " (from stdin)"
	case strings.HasPrefix(input, "@"):
		b, err := os.ReadFile(input[1:])
		if err != nil {
			return nil, fmt.Errorf("read the request: %w", err)
		}
		data, from = b, " (from "+input[1:]+")"
	default:
		data = []byte(input)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	req := dynamicpb.NewMessage(in)
	if err := (protojson.UnmarshalOptions{Resolver: t.types}).Unmarshal(data, req); err != nil {
		return nil, fmt.Errorf("the request%s is not a valid %s in JSON: %s\n  %s fields: %s",
			from, in.FullName(), protoErrorText(err), in.FullName(), describeFields(in))
	}
	return req, nil
}

// protoErrorText is a protobuf decoding error without its "proto:" prefix
// (which protojson writes with a non-breaking space).
func protoErrorText(err error) string {
	return strings.TrimLeft(strings.TrimPrefix(err.Error(), "proto:"), " \u00a0")
}

// describeFields lists a message's fields as JSON names with types, for
// error messages.
func describeFields(md protoreflect.MessageDescriptor) string {
	if md.Fields().Len() == 0 {
		return "(none: send {})"
	}
	parts := make([]string, md.Fields().Len())
	for i := range md.Fields().Len() {
		fd := md.Fields().Get(i)
		typ := fd.Kind().String()
		switch {
		case fd.IsMap():
			typ = "map"
		case fd.Message() != nil:
			typ = string(fd.Message().FullName())
		case fd.Enum() != nil:
			typ = string(fd.Enum().FullName())
		}
		if fd.IsList() {
			typ = "repeated " + typ
		}
		parts[i] = fmt.Sprintf("%s (%s)", fd.JSONName(), typ)
	}
	return strings.Join(parts, ", ")
}

// printCallError shows a failed call's code, message and details. Details
// are decoded with the schema's types, else with the types rpr itself
// knows (the well-known types); otherwise their type URL is shown.
func printCallError(out io.Writer, fullMethod, rid string, err error, types *dynamicpb.Types) {
	code := tunnel.CodeOf(err)
	message := err.Error()
	var details []*anypb.Any
	if e, _ := tunnel.AsError(err); e != nil {
		message = e.Message()
		details = e.Details()
	}
	fmt.Fprintf(out, "%s failed\n", fullMethod)
	fmt.Fprintf(out, "  code:       %s (%d)\n", code, uint32(code))
	fmt.Fprintf(out, "  message:    %s\n", message)
	if rid != "" {
		fmt.Fprintf(out, "  request id: %s\n", rid)
	}
	if tunnel.NotExecuted(err) {
		fmt.Fprintln(out, "  executed:   no (safe to retry)")
	}
	if len(details) == 0 {
		return
	}
	fmt.Fprintln(out, "  details:")
	for _, d := range details {
		fmt.Fprintf(out, "    - %s\n", describeDetail(d, types))
	}
}

// describeDetail decodes one error detail for display.
func describeDetail(a *anypb.Any, types *dynamicpb.Types) string {
	mt, err := types.FindMessageByURL(a.GetTypeUrl())
	if err != nil {
		mt, err = protoregistry.GlobalTypes.FindMessageByURL(a.GetTypeUrl())
	}
	if err != nil {
		return fmt.Sprintf("%s (type not in the published schema; %d bytes)", a.GetTypeUrl(), len(a.GetValue()))
	}
	m := mt.New().Interface()
	if err := (proto.UnmarshalOptions{Resolver: types}).Unmarshal(a.GetValue(), m); err != nil {
		return fmt.Sprintf("%s (undecodable: %v)", a.GetTypeUrl(), err)
	}
	text, err := protojson.MarshalOptions{Resolver: types}.Marshal(m)
	if err != nil {
		return fmt.Sprintf("%s (cannot show as JSON: %v)", a.GetTypeUrl(), err)
	}
	var compact bytes.Buffer
	if json.Compact(&compact, text) != nil {
		compact.Reset()
		compact.Write(text)
	}
	return fmt.Sprintf("%s %s", mt.Descriptor().FullName(), compact.String())
}

func printMetadata(out io.Writer, what string, md tunnel.Metadata) {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range md[k] {
			fmt.Fprintf(out, "%s: %s: %s\n", what, k, v)
		}
	}
}
