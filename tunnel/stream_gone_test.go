package tunnel_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

// When one side of a stream goes away without saying so: a worker that can
// no longer reach Redis (its connections cut by a proxy, so it stops
// beating), and a caller that stops renewing its response stream. Also
// ServerOptions.MaxStreams. The processes stay alive; the fault tests in
// internal/faulttest kill real ones.

// execLog records, per request id, which workers ran a handler.
type execLog struct {
	mu   sync.Mutex
	runs map[string][]string
}

func (l *execLog) ran(id, worker string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs == nil {
		l.runs = map[string][]string{}
	}
	l.runs[id] = append(l.runs[id], worker)
}

func (l *execLog) of(id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.runs[id]...)
}

// goneImpl is the flow service as each worker of these tests runs it: Down
// sends five messages and waits for its context to end, Up and Both read
// until the caller closes or the context ends. Every start is logged.
func goneImpl(worker string, log *execLog, ended func(id string, cause error)) *flowImpl {
	begin := func(s tunnel.ServerStream) func() {
		id := tunnel.RequestIDFromContext(s.Context())
		log.ran(id, worker)
		return func() {
			if ended != nil {
				ended(id, context.Cause(s.Context()))
			}
		}
	}
	return &flowImpl{
		down: func(_ *flowMsg, s flowDownSrv) error {
			defer begin(s)()
			for i := range 5 {
				if err := s.Send(wrapperspb.Bytes([]byte{byte(i)})); err != nil {
					return err
				}
			}
			<-s.Context().Done()
			return s.Context().Err()
		},
		up: func(s flowUpSrv) error {
			defer begin(s)()
			n := int64(0)
			for {
				if _, err := s.Recv(); isEOF(err) {
					return s.SendAndClose(wrapperspb.Int64(n))
				} else if err != nil {
					return err
				}
				n++
			}
		},
		both: func(s flowDuplexes) error {
			defer begin(s)()
			for {
				m, err := s.Recv()
				if isEOF(err) {
					return nil
				}
				if err != nil {
					return err
				}
				if err := s.Send(m); err != nil {
					return err
				}
			}
		},
	}
}

// TestStreamWorkerGone cuts a worker off Redis while it runs one stream of
// each kind: each caller learns within a few seconds that its stream broke
// (UNAVAILABLE, how many messages it had, that the request may have had
// effects), and no other worker runs any of them again.
func TestStreamWorkerGone(t *testing.T) {
	w := newStreamWorld(t)
	var log execLog
	proxy := newCutProxy(t, w.redis.Addr())
	lease := time.Second
	w.serve(proxy, tunnel.ServerOptions{WorkerID: "victim", Lease: lease}, func(s *tunnel.Server) {
		s.RegisterService(&flowDesc, goneImpl("victim", &log, nil))
	})
	c := w.client(nil, tunnel.ClientOptions{})
	ctx := context.Background()
	open := func(name string) (*tunnel.GenericClientStream[flowMsg, flowMsg], *string) {
		id := new(string)
		s, err := c.NewStream(ctx, flowMethod(name), tunnel.CaptureRequestID(id))
		if err != nil {
			t.Fatal(err)
		}
		return &tunnel.GenericClientStream[flowMsg, flowMsg]{ClientStream: s}, id
	}
	waitFor(t, "the victim to take streams", func() bool { return pingBoth(c, flowMethod("Both")) })

	down, downID := open("Down")
	if err := down.Send(wrapperspb.Bytes(nil)); err != nil {
		t.Fatal(err)
	}
	if err := down.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := down.Recv(); err != nil {
			t.Fatalf("Down message %d: %v", i, err)
		}
	}
	up, upID := open("Up")
	for range 3 {
		if err := up.Send(wrapperspb.Bytes([]byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	both, bothID := open("Both")
	for i := range 2 {
		if err := both.Send(wrapperspb.Bytes([]byte("ping"))); err != nil {
			t.Fatal(err)
		}
		if _, err := both.Recv(); err != nil {
			t.Fatalf("Both pong %d: %v", i, err)
		}
	}
	waitFor(t, "the three streams to run on the victim", func() bool {
		return len(log.of(*downID)) == 1 && len(log.of(*upID)) == 1 && len(log.of(*bothID)) == 1
	})

	// A second worker, live all along, that could take the streams over
	// were they ever handed on.
	w.serve(nil, tunnel.ServerOptions{WorkerID: "survivor", Lease: lease}, func(s *tunnel.Server) {
		s.RegisterService(&flowDesc, goneImpl("survivor", &log, nil))
	})
	cutAt := time.Now()
	proxy.cutOff()
	t.Cleanup(proxy.restore) // before the victim's Serve is stopped

	for _, tc := range []struct {
		name     string
		s        tunnel.ClientStream
		received int
	}{{"Down", down, 5}, {"Up", up, 0}, {"Both", both, 2}} {
		if _, ok := within(tc.s.Context().Done(), 30*time.Second); !ok {
			t.Fatalf("%s: the stream did not end within 30s of its worker going away", tc.name)
		}
		took := time.Since(cutAt)
		err := tc.s.RecvMsg(new(flowMsg))
		msg := fmt.Sprint(err)
		want := []string{"stream broke", fmt.Sprintf("received %d messages", tc.received), "may have had effects"}
		if tunnel.CodeOf(err) != tunnel.Unavailable || tunnel.NotExecuted(err) {
			t.Errorf("%s: %v (NotExecuted %v), want UNAVAILABLE that may have had effects", tc.name, err, tunnel.NotExecuted(err))
		}
		for _, part := range want {
			if !strings.Contains(msg, part) {
				t.Errorf("%s: error %q does not say %q", tc.name, msg, part)
			}
		}
		t.Logf("%s ended %v after its worker was cut off: %v", tc.name, took.Round(10*time.Millisecond), err)
	}

	// Longer than a lease and a takeover scan many times over: a stream
	// that would be handed on has been by now.
	time.Sleep(6 * lease)
	for name, id := range map[string]string{"Down": *downID, "Up": *upID, "Both": *bothID} {
		if got := log.of(id); len(got) != 1 || got[0] != "victim" {
			t.Errorf("%s (%s) ran on %v, want once, on the victim", name, id, got)
		}
	}
}

// TestStreamCallerGone cuts a caller off Redis mid-stream (it neither
// cancels nor closes): the handler's context ends by itself within a few
// seconds, its cause saying the caller is gone, and the stream's state
// then expires.
func TestStreamCallerGone(t *testing.T) {
	w := newStreamWorld(t)
	var log execLog
	type end struct {
		id    string
		cause error
		at    time.Time
	}
	ended := make(chan end, 4)
	w.serve(nil, tunnel.ServerOptions{WorkerID: "worker"}, func(s *tunnel.Server) {
		s.RegisterService(&flowDesc, goneImpl("worker", &log, func(id string, cause error) { ended <- end{id, cause, time.Now()} }))
	})
	proxy := newCutProxy(t, w.redis.Addr())
	c := w.client(proxy, tunnel.ClientOptions{ID: "doomed"})
	t.Cleanup(proxy.restore) // before the client is closed
	var id string
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waitFor(t, "a stream to run", func() bool {
		s, err := c.NewStream(ctx, flowMethod("Down"), tunnel.CaptureRequestID(&id))
		if err != nil {
			return false
		}
		down := &tunnel.GenericClientStream[flowMsg, flowMsg]{ClientStream: s}
		if down.Send(wrapperspb.Bytes(nil)) != nil || down.CloseSend() != nil {
			return false
		}
		_, err = down.Recv()
		return err == nil
	})
	cutAt := time.Now()
	proxy.cutOff()

	got, ok := within(ended, 40*time.Second)
	if !ok {
		t.Fatal("the handler's context did not end within 40s of its caller going away")
	}
	if got.id != id {
		t.Fatalf("handler of %s ended, want %s", got.id, id)
	}
	if !strings.Contains(fmt.Sprint(got.cause), "caller is gone") {
		t.Errorf("handler's context ended with cause %v, want one saying the caller is gone", got.cause)
	}
	t.Logf("the handler's context ended %v after its caller was cut off: %v", got.at.Sub(cutAt).Round(10*time.Millisecond), got.cause)

	shard := w.keys.Shard(flowService, 0)
	waitFor(t, "the stream's end to be recorded", func() bool {
		d := w.pttl(shard.State(id))
		return d > 0 && d < time.Hour
	})
	for _, key := range []string{shard.State(id), shard.Responses("doomed")} {
		if d := w.pttl(key); d <= 0 || d > time.Minute {
			t.Errorf("%s has PTTL %v after its caller went away; want it to expire within a minute", key, d)
		}
	}
	if runs := log.of(id); len(runs) != 1 {
		t.Errorf("the stream ran %v, want once", runs)
	}
}

// TestStreamMaxStreams: a server with MaxStreams open refuses the next
// stream with RESOURCE_EXHAUSTED, without running it, and takes new ones
// again once one ends.
func TestStreamMaxStreams(t *testing.T) {
	w := newStreamWorld(t)
	var log execLog
	w.serve(nil, tunnel.ServerOptions{MaxStreams: 2}, func(s *tunnel.Server) {
		s.RegisterService(&flowDesc, goneImpl("w", &log, nil))
	})
	c := w.client(nil, tunnel.ClientOptions{})
	ctx := context.Background()
	open := func() (*tunnel.GenericClientStream[flowMsg, flowMsg], string, error) {
		var id string
		s, err := c.NewStream(ctx, flowMethod("Both"), tunnel.CaptureRequestID(&id))
		if err != nil {
			return nil, id, err
		}
		both := &tunnel.GenericClientStream[flowMsg, flowMsg]{ClientStream: s}
		if err := both.Send(wrapperspb.Bytes([]byte("ping"))); err != nil {
			return both, id, err
		}
		_, err = both.Recv()
		return both, id, err
	}
	var first *tunnel.GenericClientStream[flowMsg, flowMsg]
	waitFor(t, "a first stream", func() bool {
		s, _, err := open()
		first = s
		return err == nil
	})
	if _, _, err := open(); err != nil {
		t.Fatalf("second stream (MaxStreams 2): %v", err)
	}
	_, refusedID, err := open()
	if tunnel.CodeOf(err) != tunnel.ResourceExhausted {
		t.Fatalf("third stream (MaxStreams 2): %v, want RESOURCE_EXHAUSTED", err)
	}
	if !strings.Contains(err.Error(), "MaxStreams") {
		t.Errorf("refusal %q does not name MaxStreams", err)
	}
	if !tunnel.NotExecuted(err) {
		t.Errorf("refusal %q is not NotExecuted: the caller cannot tell that opening it again is safe", err)
	}
	if got := log.of(refusedID); len(got) != 0 {
		t.Errorf("the refused stream ran on %v", got)
	}

	if err := first.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); !isEOF(err) {
		t.Fatalf("first stream's end: %v", err)
	}
	waitFor(t, "a stream to be taken again once one ended", func() bool {
		_, _, err := open()
		return err == nil
	})
}
