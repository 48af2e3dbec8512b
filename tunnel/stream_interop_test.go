package tunnel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

// The interop cases themselves; the service and its harness are described
// with interopService.

func TestStreamInteropClientStreaming(t *testing.T) {
	e := newInteropEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{})
	var id string
	s, err := e.input(context.Background(), tunnel.CaptureRequestID(&id))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range interopRequestSizes {
		if err := s.Send(wrapperspb.Bytes(make([]byte, n))); err != nil {
			t.Fatalf("send %d bytes: %v", n, err)
		}
	}
	reply, err := s.CloseAndRecv()
	if err != nil {
		t.Fatal(err)
	}
	if reply.GetValue() != 74922 {
		t.Errorf("aggregated payload size %d, want 74922", reply.GetValue())
	}
	run := e.ended(t, id)
	if run.runs != 1 || !slices.Equal(run.received, interopRequestSizes) {
		t.Errorf("handler ran %d times and received sizes %v, want once and %v", run.runs, run.received, interopRequestSizes)
	}
}

func TestStreamInteropServerStreaming(t *testing.T) {
	e := newInteropEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{})
	var id string
	s, err := e.output(context.Background(), params(map[string]any{"sizes": sizesOf(interopResponseSizes)}), tunnel.CaptureRequestID(&id))
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for {
		m, err := s.Recv()
		if isEOF(err) {
			break
		}
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got = append(got, len(m.GetValue()))
	}
	if !slices.Equal(got, interopResponseSizes) {
		t.Errorf("received sizes %v, want %v", got, interopResponseSizes)
	}
	if run := e.ended(t, id); run.runs != 1 {
		t.Errorf("handler ran %d times", run.runs)
	}
}

func TestStreamInteropPingPong(t *testing.T) {
	e := newInteropEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{})
	var id string
	s, err := e.duplex(context.Background(), tunnel.CaptureRequestID(&id))
	if err != nil {
		t.Fatal(err)
	}
	for i := range interopRequestSizes {
		req := params(map[string]any{"size": interopResponseSizes[i], "payload": strings.Repeat("a", interopRequestSizes[i])})
		if err := s.Send(req); err != nil {
			t.Fatalf("ping %d: %v", i, err)
		}
		m, err := s.Recv()
		if err != nil {
			t.Fatalf("pong %d: %v", i, err)
		}
		if len(m.GetValue()) != interopResponseSizes[i] {
			t.Fatalf("pong %d is %d bytes, want %d", i, len(m.GetValue()), interopResponseSizes[i])
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); !isEOF(err) {
		t.Fatalf("after CloseSend: %v, want io.EOF", err)
	}
	run := e.ended(t, id)
	if run.runs != 1 || !slices.Equal(run.received, interopRequestSizes) {
		t.Errorf("handler ran %d times and received sizes %v, want once and %v", run.runs, run.received, interopRequestSizes)
	}
}

func TestStreamInteropEmptyStream(t *testing.T) {
	e := newInteropEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{})
	var id string
	s, err := e.duplex(context.Background(), tunnel.CaptureRequestID(&id))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Recv(); !isEOF(err) {
		t.Fatalf("empty stream: Recv = %v, %v; want io.EOF", m, err)
	}
	run := e.ended(t, id)
	if run.runs != 1 || len(run.received) != 0 {
		t.Errorf("handler ran %d times and received %v, want once and nothing", run.runs, run.received)
	}
}

// TestStreamInteropCancelAfterBegin cancels a client-streaming call before
// it sends anything (nothing reaches Redis: NotExecuted) and one that has
// begun (the handler runs and its context ends).
func TestStreamInteropCancelAfterBegin(t *testing.T) {
	e := newInteropEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{})
	t.Run("nothing sent", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var id string
		s, err := e.input(ctx, tunnel.CaptureRequestID(&id))
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		_, err = s.CloseAndRecv()
		if tunnel.CodeOf(err) != tunnel.Canceled || !tunnel.NotExecuted(err) {
			t.Fatalf("CloseAndRecv after cancel = %v (NotExecuted %v), want CANCELED, not executed", err, tunnel.NotExecuted(err))
		}
		time.Sleep(200 * time.Millisecond) // a handler that wrongly ran would have started
		if e.impl.run(id) != nil {
			t.Fatal("a handler ran a stream that was cancelled before it was opened")
		}
	})
	t.Run("begun", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var id string
		s, err := e.input(ctx, tunnel.CaptureRequestID(&id))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(wrapperspb.Bytes(make([]byte, interopRequestSizes[0]))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the handler to receive the first message", func() bool {
			return len(e.impl.snapshot(id).received) == 1
		})
		cancel()
		_, err = s.CloseAndRecv()
		if tunnel.CodeOf(err) != tunnel.Canceled || tunnel.NotExecuted(err) {
			t.Fatalf("CloseAndRecv after cancel = %v (NotExecuted %v), want CANCELED that may have executed", err, tunnel.NotExecuted(err))
		}
		run := e.ended(t, id)
		if !errors.Is(run.ctxErr, context.Canceled) {
			t.Errorf("handler's context ended with %v (cause %v), want context.Canceled", run.ctxErr, run.cause)
		}
		t.Logf("handler's context cause: %v", run.cause)
	})
}

func TestStreamInteropCancelAfterFirstResponse(t *testing.T) {
	e := newInteropEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var id string
	s, err := e.duplex(ctx, tunnel.CaptureRequestID(&id))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(params(map[string]any{"size": 31415, "payload": strings.Repeat("a", 27182)})); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Recv(); err != nil || len(m.GetValue()) != 31415 {
		t.Fatalf("first response: %d bytes, %v", len(m.GetValue()), err)
	}
	cancel()
	_, err = s.Recv()
	if tunnel.CodeOf(err) != tunnel.Canceled || tunnel.NotExecuted(err) {
		t.Fatalf("Recv after cancel = %v, want CANCELED that may have executed", err)
	}
	if err := s.Send(params(map[string]any{"size": 1})); !isEOF(err) {
		t.Errorf("Send after cancel = %v, want io.EOF", err)
	}
	run := e.ended(t, id)
	if !errors.Is(run.ctxErr, context.Canceled) {
		t.Errorf("handler's context ended with %v (cause %v), want context.Canceled", run.ctxErr, run.cause)
	}
	t.Logf("handler's context cause: %v", run.cause)
}

// TestStreamInteropTimeoutOnSleepingServer: the stream's deadline ends it
// on both sides while the handler sleeps.
func TestStreamInteropTimeoutOnSleepingServer(t *testing.T) {
	e := newInteropEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var id string
	s, err := e.duplex(ctx, tunnel.CaptureRequestID(&id))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(params(map[string]any{"sleep": true, "payload": strings.Repeat("a", 27182)})); err != nil {
		t.Fatal(err)
	}
	_, err = s.Recv()
	if tunnel.CodeOf(err) != tunnel.DeadlineExceeded || tunnel.NotExecuted(err) {
		t.Fatalf("Recv = %v, want DEADLINE_EXCEEDED that may have executed", err)
	}
	run := e.ended(t, id)
	if run.ctxErr == nil {
		t.Fatal("the handler returned with its context still live")
	}
	if !errors.Is(run.ctxErr, context.DeadlineExceeded) {
		t.Errorf("handler's context ended with %v (cause %v), want its deadline", run.ctxErr, run.cause)
	}
	if !slices.Equal(run.received, []int{27182}) {
		t.Errorf("handler received %v, want [27182]", run.received)
	}
}

// TestStreamInteropCustomMetadata: request headers reach the handler,
// SetHeader and SendHeader reach Header(), SetTrailer reaches Trailer(), on
// a server-streaming and a bidirectional call.
func TestStreamInteropCustomMetadata(t *testing.T) {
	e := newInteropEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{})
	ctx := context.Background()
	md := []tunnel.CallOption{tunnel.WithHeader(echoInitialKey, echoInitialValue), tunnel.WithHeader(echoTrailingKey, echoTrailingValue)}
	check := func(t *testing.T, id string, s tunnel.ClientStream, recv func() error) {
		t.Helper()
		header, err := s.Header()
		if err != nil {
			t.Fatalf("Header: %v", err)
		}
		if header.Get(echoInitialKey) != echoInitialValue || header.Get(headerSentKey) != "yes" {
			t.Errorf("response header %v, want %s=%q (SetHeader) and %s=yes (SendHeader)", header, echoInitialKey, echoInitialValue, headerSentKey)
		}
		if tr := s.Trailer(); tr != nil {
			t.Errorf("Trailer before the end = %v, want nil", tr)
		}
		if err := recv(); err != nil {
			t.Fatal(err)
		}
		if got := s.Trailer().Get(echoTrailingKey); got != echoTrailingValue {
			t.Errorf("trailer %s = %q, want %q (trailer %v)", echoTrailingKey, got, echoTrailingValue, s.Trailer())
		}
		run := e.ended(t, id)
		if run.header.Get(echoInitialKey) != echoInitialValue || run.header.Get(echoTrailingKey) != echoTrailingValue {
			t.Errorf("handler saw request header %v, want both echo keys", run.header)
		}
	}
	t.Run("server streaming", func(t *testing.T) {
		var id string
		s, err := e.output(ctx, params(map[string]any{"sizes": []any{1, 2}}), append(md, tunnel.CaptureRequestID(&id))...)
		if err != nil {
			t.Fatal(err)
		}
		check(t, id, s, func() error {
			for n := 0; ; n++ {
				if _, err := s.Recv(); isEOF(err) {
					if n != 2 {
						return fmt.Errorf("received %d messages, want 2", n)
					}
					return nil
				} else if err != nil {
					return err
				}
			}
		})
	})
	t.Run("bidi", func(t *testing.T) {
		var id string
		s, err := e.duplex(ctx, append(md, tunnel.CaptureRequestID(&id))...)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(params(map[string]any{"size": 31415, "payload": "x"})); err != nil {
			t.Fatal(err)
		}
		check(t, id, s, func() error {
			if m, err := s.Recv(); err != nil || len(m.GetValue()) != 31415 {
				return fmt.Errorf("pong: %d bytes, %v", len(m.GetValue()), err)
			}
			if err := s.CloseSend(); err != nil {
				return err
			}
			if _, err := s.Recv(); !isEOF(err) {
				return fmt.Errorf("after CloseSend: %v, want io.EOF", err)
			}
			return nil
		})
	})
}

// TestStreamInteropStatus: a handler's status reaches the caller exactly,
// with a message of whitespace and Unicode and with error details.
func TestStreamInteropStatus(t *testing.T) {
	e := newInteropEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{})
	const special = "\t\ntest with whitespace\r\nand Unicode BMP ☺ and non-BMP 😈\t\n"
	for _, tc := range []struct {
		name    string
		code    tunnel.Code
		message string
		details bool
	}{
		{"status code and message", tunnel.Unknown, "test status message", false},
		{"special status message", tunnel.Unknown, special, false},
		{"error details", tunnel.InvalidArgument, special, true},
	} {
		for _, kind := range []string{"bidi", "server streaming"} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				p := params(map[string]any{"code": int(tc.code), "message": tc.message, "details": tc.details, "sizes": []any{}})
				var err error
				if kind == "bidi" {
					d, oerr := e.duplex(context.Background())
					if oerr != nil {
						t.Fatal(oerr)
					}
					if serr := d.Send(p); serr != nil {
						t.Fatal(serr)
					}
					_, err = d.Recv()
				} else {
					o, oerr := e.output(context.Background(), p)
					if oerr != nil {
						t.Fatal(oerr)
					}
					_, err = o.Recv()
				}
				st, ok := tunnel.AsError(err)
				if !ok || st.Code() != tc.code || st.Message() != tc.message {
					t.Fatalf("status %#v (%v), want code %s and message %q", st, err, tc.code, tc.message)
				}
				if tunnel.NotExecuted(err) {
					t.Error("a handler's status claims the call was not executed")
				}
				if !tc.details {
					if len(st.Details()) != 0 {
						t.Errorf("details %v, want none", st.Details())
					}
					return
				}
				checkInteropDetails(t, st)
			})
		}
	}
}

func checkInteropDetails(t *testing.T, st *tunnel.Error) {
	t.Helper()
	if len(st.Details()) != 2 {
		t.Fatalf("%d details, want 2: %v", len(st.Details()), st.Details())
	}
	bad, retry := new(errdetails.BadRequest), new(errdetails.RetryInfo)
	if err := st.Details()[0].UnmarshalTo(bad); err != nil {
		t.Fatal(err)
	}
	if err := st.Details()[1].UnmarshalTo(retry); err != nil {
		t.Fatal(err)
	}
	want := &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "size", Description: "too ☺ big"}}}
	if !proto.Equal(bad, want) || retry.GetRetryDelay().AsDuration() != 1500*time.Millisecond {
		t.Errorf("details %v and %v, want %v and a 1.5s retry delay", bad, retry, want)
	}
}

// TestStreamInteropErrorAfterMessages: a handler that fails after sending
// some messages: they arrive first, in order, then its status, with the
// trailer.
func TestStreamInteropErrorAfterMessages(t *testing.T) {
	e := newInteropEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{})
	p := params(map[string]any{"sizes": sizesOf(interopResponseSizes), "fail_after": 3, "code": int(tunnel.Aborted), "message": "stopped after three", "details": true})
	s, err := e.output(context.Background(), p, tunnel.WithHeader(echoTrailingKey, echoTrailingValue))
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for {
		m, err := s.Recv()
		if err == nil {
			got = append(got, len(m.GetValue()))
			continue
		}
		st, ok := tunnel.AsError(err)
		if !ok || st.Code() != tunnel.Aborted || st.Message() != "stopped after three" {
			t.Fatalf("after %v: %v, want ABORTED \"stopped after three\"", got, err)
		}
		checkInteropDetails(t, st)
		break
	}
	if !slices.Equal(got, interopResponseSizes[:3]) {
		t.Errorf("received %v before the status, want %v", got, interopResponseSizes[:3])
	}
	if tr := s.Trailer().Get(echoTrailingKey); tr != echoTrailingValue {
		t.Errorf("trailer after a failed stream: %q, want %q", tr, echoTrailingValue)
	}
	if _, err := s.Recv(); tunnel.CodeOf(err) != tunnel.Aborted {
		t.Errorf("Recv after the end = %v, want the same status again", err)
	}
}
