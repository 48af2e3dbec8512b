package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rprtunnel/rpr/tunnel"
)

// runStreamCall makes a streaming call: a server-streaming method takes
// the one request as for a unary call and prints each reply as one JSON
// line as it arrives; a client-streaming or bidirectional method reads its
// requests as JSON lines (from stdin, -, or a file, @file) and prints the
// reply (client streaming) or each reply as it arrives (bidi).
func runStreamCall(cmd *cobra.Command, client *tunnel.Client, method *tunnel.MethodDesc, target *schemaTarget, input string, header [][2]string, flags callFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	var lines *bufio.Scanner
	var first proto.Message
	if method.ClientStreams {
		src, err := openLines(cmd.InOrStdin(), input)
		if err != nil {
			return badInput(err)
		}
		defer src.Close()
		lines = bufio.NewScanner(src)
		lines.Buffer(make([]byte, 0, 64<<10), 64<<20)
	} else {
		req, err := readRequest(cmd.InOrStdin(), input, target)
		if err != nil {
			return badInput(err)
		}
		first = req
	}
	var rid string
	opts := callOptions(&rid, header, flags)
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	stream, err := client.NewStream(ctx, method, opts...)
	if err != nil {
		printCallError(stderr, method.FullMethod(), rid, err, target.types)
		return exitError{code: exitFailed}
	}
	sendErr := make(chan error, 1)
	if first != nil {
		sendErr <- sendAndClose(stream, first)
	} else {
		// Requests go while replies come: a bidirectional server may answer
		// each one before the next is read.
		go func() { sendErr <- sendLines(stream, lines, target) }()
	}
	var out sync.Mutex
	recvErr := printReplies(stream, target, flags, stdout, &out, !method.ServerStreams)
	if err := <-sendErr; err != nil && recvErr == nil {
		cancel()
		return badInput(err)
	}
	if flags.verbose {
		fmt.Fprintf(stderr, "request id: %s\n", rid)
		if h, err := stream.Header(); err == nil {
			printMetadata(stderr, "response header", h)
		}
		printMetadata(stderr, "trailer", stream.Trailer())
	}
	if recvErr != nil {
		printCallError(stderr, method.FullMethod(), rid, recvErr, target.types)
		return exitError{code: exitFailed}
	}
	return nil
}

// sendAndClose sends a server-streaming call's one request.
func sendAndClose(stream tunnel.ClientStream, req proto.Message) error {
	if err := stream.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return stream.CloseSend()
}

// sendLines sends one request per non-empty line, then closes the sending
// side. A line that is not a valid request stops it with an error naming
// the line.
func sendLines(stream tunnel.ClientStream, lines *bufio.Scanner, target *schemaTarget) error {
	defer stream.CloseSend()
	in := target.method.Input()
	for n := 1; lines.Scan(); n++ {
		line := bytes.TrimSpace(lines.Bytes())
		if len(line) == 0 {
			continue
		}
		req := dynamicpb.NewMessage(in)
		if err := (protojson.UnmarshalOptions{Resolver: target.types}).Unmarshal(line, req); err != nil {
			return fmt.Errorf("request line %d is not a valid %s in JSON: %s\n  %s fields: %s",
				n, in.FullName(), protoErrorText(err), in.FullName(), describeFields(in))
		}
		if err := stream.SendMsg(req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // the stream ended; the replies say why
			}
			return err
		}
	}
	if err := lines.Err(); err != nil {
		return fmt.Errorf("read the requests: %w", err)
	}
	return nil
}

// printReplies prints each reply as it arrives, one compact JSON line per
// message (indented, when the method has one reply), until the stream
// ends; it returns nil for a clean end, else the stream's status.
func printReplies(stream tunnel.ClientStream, target *schemaTarget, flags callFlags, stdout io.Writer, out *sync.Mutex, single bool) error {
	marshal := protojson.MarshalOptions{Resolver: target.types, EmitUnpopulated: flags.emitDefaults}
	for {
		reply := dynamicpb.NewMessage(target.method.Output())
		err := stream.RecvMsg(reply)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		text, err := marshal.Marshal(reply)
		if err != nil {
			return fmt.Errorf("a reply cannot be shown as JSON: %w", err)
		}
		var b bytes.Buffer
		if single {
			err = json.Indent(&b, text, "", "  ")
		} else {
			err = json.Compact(&b, text)
		}
		if err != nil {
			return fmt.Errorf("a reply cannot be shown as JSON: %w", err)
		}
		b.WriteByte('\n')
		out.Lock()
		_, err = stdout.Write(b.Bytes())
		out.Unlock()
		if err != nil {
			return err
		}
		if single {
			return nil
		}
	}
}

// openLines opens where a stream's requests come from: stdin (- or no
// argument) or a file (@file).
func openLines(stdin io.Reader, input string) (io.ReadCloser, error) {
	switch {
	case input == "-" || input == "":
		return io.NopCloser(stdin), nil
	case strings.HasPrefix(input, "@"):
		f, err := os.Open(input[1:])
		if err != nil {
			return nil, fmt.Errorf("read the requests: %w", err)
		}
		return f, nil
	}
	return io.NopCloser(strings.NewReader(input)), nil
}
