package tunnel_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

// The flow-control tests; the flow service, its harness and the checks
// they share are described with flowService.

// TestStreamFlowServerToCaller holds a handler sending as fast as it can to
// the window the caller granted (ClientOptions.StreamWindow), in messages
// and in bytes, while the caller receives slowly.
func TestStreamFlowServerToCaller(t *testing.T) {
	for _, tc := range flowCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newFlowEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{StreamWindow: tc.window})
			var sent counter
			e.impl.down = func(_ *flowMsg, s flowDownSrv) error {
				for range tc.messages {
					m := wrapperspb.Bytes(make([]byte, tc.size))
					if err := s.Send(m); err != nil {
						return err
					}
					sent.add(m)
				}
				return nil
			}
			var id string
			s, err := e.down(context.Background(), 0, tunnel.CaptureRequestID(&id))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Header(); err != nil { // the stream runs
				t.Fatal(err)
			}
			stalled(t, &sent, 0, tc.ahead)
			var consumed, consumedBytes, maxXlen, maxMemory int64
			check := func() {
				t.Helper()
				if n, b := sent.n.Load(), sent.bytes.Load(); n > consumed+tc.ahead || b > consumedBytes+tc.window.Bytes {
					t.Fatalf("sender is %d messages, %d bytes ahead of the caller, past the window (%d messages, %d bytes)", n-consumed, b-consumedBytes, tc.window.Messages, tc.window.Bytes)
				}
				h := e.held(t, e.responses(), id, consumed)
				if h.messages > tc.ahead || h.bytes > tc.window.Bytes {
					t.Fatalf("the caller's response stream holds %d unconsumed messages (%d bytes) of the stream, past the window", h.messages, h.bytes)
				}
				maxXlen, maxMemory = max(maxXlen, h.xlen), max(maxMemory, h.memory)
			}
			check()
			for consumed < int64(tc.messages) {
				m, err := s.Recv()
				if err != nil {
					t.Fatalf("after %d messages: %v", consumed, err)
				}
				consumed++
				consumedBytes += int64(proto.Size(m))
				if consumed%3 == 0 {
					time.Sleep(20 * time.Millisecond) // a slow receiver
					check()
				}
			}
			if _, err := s.Recv(); !isEOF(err) {
				t.Fatalf("after all messages: %v, want io.EOF", err)
			}
			t.Logf("window %d messages / %d bytes, %d-byte messages: the handler ran %d ahead at most; caller's response stream peaked at %d entries, %d bytes (MEMORY USAGE)",
				tc.window.Messages, tc.window.Bytes, tc.size, tc.ahead, maxXlen, maxMemory)
		})
	}
}

// TestStreamFlowCallerToServer holds a caller sending as fast as it can to
// the window the server granted (ServerOptions.StreamWindow) while the
// handler receives one message at a time when the test lets it.
func TestStreamFlowCallerToServer(t *testing.T) {
	for _, tc := range flowCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newFlowEnv(t, tunnel.ServerOptions{StreamWindow: tc.window}, tunnel.ClientOptions{})
			next := make(chan struct{})
			var consumed counter
			e.impl.up = func(s flowUpSrv) error {
				for {
					select {
					case <-next:
					case <-s.Context().Done():
						return s.Context().Err()
					}
					m, err := s.Recv()
					if isEOF(err) {
						return s.SendAndClose(wrapperspb.Int64(consumed.n.Load()))
					}
					if err != nil {
						return err
					}
					consumed.add(m)
				}
			}
			var id string
			s := e.up(context.Background(), tunnel.CaptureRequestID(&id))
			var sent counter
			sendErr := make(chan error, 1)
			go func() {
				for range tc.messages {
					m := wrapperspb.Bytes(make([]byte, tc.size))
					if err := s.Send(m); err != nil {
						sendErr <- err
						return
					}
					sent.add(m)
				}
				sendErr <- nil
			}()
			stalled(t, &sent, 0, tc.ahead)
			var maxXlen, maxMemory int64
			for i := int64(1); i <= int64(tc.messages); i++ {
				next <- struct{}{}
				waitFor(t, "the handler to consume a message", func() bool { return consumed.n.Load() == i })
				if i%3 == 0 {
					time.Sleep(20 * time.Millisecond)
				}
				if n, b := sent.n.Load(), sent.bytes.Load(); n > i+tc.ahead || b > consumed.bytes.Load()+tc.window.Bytes {
					t.Fatalf("caller is %d messages, %d bytes ahead of the handler, past the window (%d messages, %d bytes)", n-i, b-consumed.bytes.Load(), tc.window.Messages, tc.window.Bytes)
				}
				h := e.held(t, e.inbox(), id, i)
				if h.messages > tc.ahead || h.bytes > tc.window.Bytes {
					t.Fatalf("the worker's inbox holds %d unconsumed messages (%d bytes) of the stream, past the window", h.messages, h.bytes)
				}
				maxXlen, maxMemory = max(maxXlen, h.xlen), max(maxMemory, h.memory)
			}
			if err, ok := within(sendErr, 10*time.Second); !ok || err != nil {
				t.Fatalf("sender: %v (finished: %v)", err, ok)
			}
			next <- struct{}{} // to see the end
			reply, err := s.CloseAndRecv()
			if err != nil || reply.GetValue() != int64(tc.messages) {
				t.Fatalf("CloseAndRecv = %v, %v; want %d", reply, err, tc.messages)
			}
			t.Logf("window %d messages / %d bytes, %d-byte messages: the caller ran %d ahead at most; the worker's inbox peaked at %d entries, %d bytes (MEMORY USAGE)",
				tc.window.Messages, tc.window.Bytes, tc.size, tc.ahead, maxXlen, maxMemory)
		})
	}
}

// TestStreamFlowRedisBoundWhileStalled: with the receiver consuming
// nothing for several client refreshes, Redis holds at most a window of
// the stream, whichever side is slow.
func TestStreamFlowRedisBoundWhileStalled(t *testing.T) {
	window := tunnel.StreamWindow{Messages: 16, Bytes: 64 << 10}
	e := newFlowEnv(t, tunnel.ServerOptions{StreamWindow: window}, tunnel.ClientOptions{StreamWindow: window})
	const size = 4 << 10
	var sentDown, sentUp counter
	release := make(chan struct{})
	e.impl.both = func(s flowDuplexes) error {
		for range 100 { // sends until held, the caller reads nothing
			m := wrapperspb.Bytes(make([]byte, size))
			if err := s.Send(m); err != nil {
				return err
			}
			sentDown.add(m)
		}
		<-release
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := e.open(ctx, "Both")
	go func() { // sends until held, the handler reads nothing
		for range 100 {
			m := wrapperspb.Bytes(make([]byte, size))
			if s.Send(m) != nil {
				return
			}
			sentUp.add(m)
		}
	}()
	ahead := min(int64(window.Messages), bytesAhead(size, window.Bytes))
	stalled(t, &sentDown, 0, ahead)
	stalled(t, &sentUp, 0, ahead)
	time.Sleep(2500 * time.Millisecond) // two client refreshes: read entries are trimmed
	limit := window.Bytes + 64<<10      // the window, and room for the stream's own structures
	for _, key := range []string{e.responses(), e.inbox()} {
		h := e.held(t, key, "", 0)
		if h.xlen > int64(window.Messages)+4 || h.memory > limit {
			t.Errorf("%s holds %d entries, %d bytes (MEMORY USAGE) with the receiver stalled; want at most the window (%d messages, %d bytes) and a few frames", key, h.xlen, h.memory, window.Messages, window.Bytes)
		}
		t.Logf("%s with a stalled receiver: %d entries, %d bytes (MEMORY USAGE)", key, h.xlen, h.memory)
	}
	close(release)
}

// TestStreamFlowHugeMessage: a message larger than the whole byte window
// goes through when nothing is outstanding, and the next one waits until it
// is consumed, in both directions.
func TestStreamFlowHugeMessage(t *testing.T) {
	window := tunnel.StreamWindow{Messages: 64, Bytes: 32 << 10}
	const huge = 200 << 10
	t.Run("server to caller", func(t *testing.T) {
		e := newFlowEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{StreamWindow: window})
		var sent counter
		e.impl.down = func(_ *flowMsg, s flowDownSrv) error {
			for _, n := range []int{huge, 10, huge} {
				m := wrapperspb.Bytes(make([]byte, n))
				if err := s.Send(m); err != nil {
					return err
				}
				sent.add(m)
			}
			return nil
		}
		// A deadline: a stream that deadlocks ends instead of hanging.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := e.down(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		stalled(t, &sent, 0, 1)
		var got []int
		for {
			m, err := s.Recv()
			if isEOF(err) {
				break
			}
			if err != nil {
				t.Fatalf("after receiving %v: %v (the sender sent %d)", got, err, sent.n.Load())
			}
			got = append(got, len(m.GetValue()))
		}
		if fmt.Sprint(got) != fmt.Sprint([]int{huge, 10, huge}) {
			t.Errorf("received sizes %v", got)
		}
	})
	t.Run("caller to server", func(t *testing.T) {
		e := newFlowEnv(t, tunnel.ServerOptions{StreamWindow: window}, tunnel.ClientOptions{})
		next := make(chan struct{}, 8)
		var mu sync.Mutex
		var got []int
		e.impl.up = func(s flowUpSrv) error {
			for {
				<-next
				m, err := s.Recv()
				mu.Lock()
				n := len(got)
				if err == nil {
					got = append(got, len(m.GetValue()))
				}
				mu.Unlock()
				if isEOF(err) {
					return s.SendAndClose(wrapperspb.Int64(int64(n)))
				}
				if err != nil {
					return err
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s := e.up(ctx)
		var sent counter
		sendDone := make(chan error, 1)
		go func() {
			for _, n := range []int{huge, 10, huge} {
				m := wrapperspb.Bytes(make([]byte, n))
				if err := s.Send(m); err != nil {
					sendDone <- err
					return
				}
				sent.add(m)
			}
			sendDone <- nil
		}()
		stalled(t, &sent, 0, 1)
		for range 4 {
			next <- struct{}{}
		}
		if err, ok := within(sendDone, 30*time.Second); !ok || err != nil {
			t.Fatalf("sending %d, 10 and %d bytes: %v after %d sent (returned: %v)", huge, huge, err, sent.n.Load(), ok)
		}
		reply, err := s.CloseAndRecv()
		mu.Lock()
		defer mu.Unlock()
		if err != nil || reply.GetValue() != 3 || fmt.Sprint(got) != fmt.Sprint([]int{huge, 10, huge}) {
			t.Fatalf("CloseAndRecv = %v, %v; handler got %v", reply, err, got)
		}
	})
}

// TestStreamFlowSendRespectsContext: a Send held by the window returns when
// the stream's context ends, on either side.
func TestStreamFlowSendRespectsContext(t *testing.T) {
	window := tunnel.StreamWindow{Messages: 4}
	t.Run("caller", func(t *testing.T) {
		e := newFlowEnv(t, tunnel.ServerOptions{StreamWindow: window}, tunnel.ClientOptions{})
		e.impl.up = func(s flowUpSrv) error { // reads nothing
			<-s.Context().Done()
			return s.Context().Err()
		}
		for _, how := range []string{"cancel", "deadline"} {
			t.Run(how, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				if how == "deadline" {
					ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
				}
				defer cancel()
				s := e.up(ctx)
				var sent counter
				done := make(chan error, 1)
				go func() {
					for {
						if err := s.Send(wrapperspb.Bytes([]byte("x"))); err != nil {
							done <- err
							return
						}
						sent.n.Add(1)
					}
				}()
				stalled(t, &sent, 0, int64(window.Messages))
				if how == "cancel" {
					cancel()
				}
				err, ok := within(done, 20*time.Second)
				if !ok {
					t.Fatal("Send held by the window did not return after the stream's context ended")
				}
				if !isEOF(err) {
					t.Errorf("Send after the context ended = %v, want io.EOF (RecvMsg tells why)", err)
				}
				_, err = s.Recv()
				want := map[string]tunnel.Code{"cancel": tunnel.Canceled, "deadline": tunnel.DeadlineExceeded}[how]
				if tunnel.CodeOf(err) != want {
					t.Errorf("Recv = %v, want %s", err, want)
				}
			})
		}
	})
	t.Run("handler", func(t *testing.T) {
		e := newFlowEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{StreamWindow: window})
		var sent counter
		sendErr := make(chan error, 1)
		e.impl.down = func(_ *flowMsg, s flowDownSrv) error {
			for {
				if err := s.Send(wrapperspb.Bytes([]byte("x"))); err != nil {
					sendErr <- err
					return err
				}
				sent.n.Add(1)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := e.down(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Header(); err != nil {
			t.Fatal(err)
		}
		stalled(t, &sent, 0, int64(window.Messages))
		cancel()
		err, ok := within(sendErr, 20*time.Second)
		if !ok {
			t.Fatal("the handler's Send held by the window did not return after the caller cancelled")
		}
		if tunnel.CodeOf(err) != tunnel.Canceled {
			t.Errorf("handler's Send after the caller cancelled = %v, want CANCELED", err)
		}
	})
}

// TestStreamFlowKeysHaveTTL: every per-stream key — the stream's state
// hash, the caller's response stream, the worker's inbox — expires by
// itself, while the stream is open and after it ended.
func TestStreamFlowKeysHaveTTL(t *testing.T) {
	e := newFlowEnv(t, tunnel.ServerOptions{}, tunnel.ClientOptions{})
	release := make(chan struct{})
	e.impl.both = func(s flowDuplexes) error {
		if _, err := s.Recv(); err != nil {
			return err
		}
		if err := s.Send(wrapperspb.Bytes([]byte("pong"))); err != nil {
			return err
		}
		<-release
		return nil
	}
	var id string
	s := e.open(context.Background(), "Both", tunnel.CaptureRequestID(&id))
	if err := s.Send(wrapperspb.Bytes([]byte("ping"))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	shard := e.keys.Shard(flowService, 0)
	perStream := []string{shard.State(id), e.responses(), e.inbox()}
	checkTTLs := func(when string) {
		t.Helper()
		for _, key := range perStream {
			if d := e.pttl(key); d <= 0 {
				t.Errorf("%s: %s has PTTL %v; every per-stream key must expire", when, key, d)
			} else {
				t.Logf("%s: %s expires in %v", when, key, d.Round(time.Second))
			}
		}
		// Any other key of the stream or its peers: the same rule.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		keys, err := e.rdb.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range keys {
			if strings.Contains(key, ":st:") || strings.Contains(key, ":resp:") || strings.Contains(key, ":in:") || strings.Contains(key, id) {
				if d := e.pttl(key); d <= 0 {
					t.Errorf("%s: %s has PTTL %v", when, key, d)
				}
			}
		}
	}
	checkTTLs("open")
	close(release)
	if _, err := s.Recv(); !isEOF(err) {
		t.Fatalf("end: %v", err)
	}
	checkTTLs("ended")
	if d := e.pttl(shard.State(id)); d > time.Hour {
		t.Errorf("the ended stream's state hash lives %v more; its lifetime was for the open stream", d)
	}
}
