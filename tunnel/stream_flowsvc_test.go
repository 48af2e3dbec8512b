package tunnel_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// Flow control: a fast sender is held to the window its receiver granted,
// in messages and in bytes, in both directions; Send blocks (within its
// context) and unblocks as the receiver consumes; a single message larger
// than the byte window still goes through when nothing is outstanding; and
// Redis holds no more of a stream than the window. The receiving side is
// driven step by step by the test, so every check runs while the receiver
// consumes nothing: the sender can then be at most a window ahead of what
// the test has consumed.

const flowService = "test.v1.StreamFlow"

var flowInfo = tunnel.ServiceInfo{Name: flowService}

type (
	flowMsg      = wrapperspb.BytesValue
	flowDownSrv  = tunnel.ServerStreamingServer[flowMsg]
	flowUpSrv    = tunnel.ClientStreamingServer[flowMsg, wrapperspb.Int64Value]
	flowDuplexes = tunnel.BidiStreamingServer[flowMsg, flowMsg]
)

// flowImpl's hooks are each test's handlers.
type flowImpl struct {
	down func(in *flowMsg, s flowDownSrv) error
	up   func(s flowUpSrv) error
	both func(s flowDuplexes) error
}

var flowDesc = tunnel.ServiceDesc{
	Service: &flowInfo,
	Methods: []tunnel.MethodDesc{
		{Service: &flowInfo, Name: "Down", ServerStreams: true, StreamHandler: func(impl any, s tunnel.ServerStream) error {
			in := new(flowMsg)
			if err := s.RecvMsg(in); err != nil {
				return err
			}
			return impl.(*flowImpl).down(in, &tunnel.GenericServerStream[flowMsg, flowMsg]{ServerStream: s})
		}},
		{Service: &flowInfo, Name: "Up", ClientStreams: true, StreamHandler: func(impl any, s tunnel.ServerStream) error {
			return impl.(*flowImpl).up(&tunnel.GenericServerStream[flowMsg, wrapperspb.Int64Value]{ServerStream: s})
		}},
		{Service: &flowInfo, Name: "Both", ClientStreams: true, ServerStreams: true, StreamHandler: func(impl any, s tunnel.ServerStream) error {
			return impl.(*flowImpl).both(&tunnel.GenericServerStream[flowMsg, flowMsg]{ServerStream: s})
		}},
	},
}

func flowMethod(name string) *tunnel.MethodDesc {
	for i := range flowDesc.Methods {
		if flowDesc.Methods[i].Name == name {
			return &flowDesc.Methods[i]
		}
	}
	panic(name)
}

// pingBoth opens a Both stream of m through c, sends one message and
// reports whether it came back, ending the stream either way before it
// returns: while a server is not up yet, failed pings open the client's
// circuit breaker, and the ping that then succeeds is its half-open
// probe until its stream ends, refusing other calls meanwhile.
func pingBoth(c *tunnel.Client, m *tunnel.MethodDesc) bool {
	raw, err := c.NewStream(context.Background(), m)
	if err != nil {
		return false
	}
	s := &tunnel.GenericClientStream[flowMsg, flowMsg]{ClientStream: raw}
	defer func() {
		_ = s.CloseSend()
		for s.RecvMsg(new(flowMsg)) == nil { // until the stream's end
		}
	}()
	if s.Send(wrapperspb.Bytes([]byte("ping"))) != nil {
		return false
	}
	_, err = s.Recv()
	return err == nil
}

const (
	flowClientID = "flow-client"
	flowWorkerID = "flow-worker"
)

// flowEnv is a Redis, one server of the flow service (worker flowWorkerID)
// and a client (flowClientID).
type flowEnv struct {
	*streamWorld
	impl   *flowImpl
	client *tunnel.Client
}

func newFlowEnv(t *testing.T, server tunnel.ServerOptions, client tunnel.ClientOptions) *flowEnv {
	t.Helper()
	e := &flowEnv{streamWorld: newStreamWorld(t), impl: &flowImpl{}}
	server.WorkerID, client.ID = flowWorkerID, flowClientID
	e.serve(nil, server, func(s *tunnel.Server) { s.RegisterService(&flowDesc, e.impl) })
	e.client = e.streamWorld.client(nil, client)
	e.impl.down = func(*flowMsg, flowDownSrv) error { return nil }
	waitFor(t, "the flow server to take streams", func() bool {
		s, err := e.down(context.Background(), 0)
		if err != nil {
			return false
		}
		_, err = s.Recv()
		return isEOF(err)
	})
	return e
}

func (e *flowEnv) down(ctx context.Context, size int, opts ...tunnel.CallOption) (tunnel.ServerStreamingClient[flowMsg], error) {
	s, err := e.client.NewStream(ctx, flowMethod("Down"), opts...)
	if err != nil {
		return nil, err
	}
	x := &tunnel.GenericClientStream[flowMsg, flowMsg]{ClientStream: s}
	if err := x.SendMsg(wrapperspb.Bytes(make([]byte, size))); err != nil {
		return nil, err
	}
	return x, x.CloseSend()
}

func (e *flowEnv) open(ctx context.Context, name string, opts ...tunnel.CallOption) *tunnel.GenericClientStream[flowMsg, flowMsg] {
	s, err := e.client.NewStream(ctx, flowMethod(name), opts...)
	if err != nil {
		panic(err) // NewStream fails only on a broken setup
	}
	return &tunnel.GenericClientStream[flowMsg, flowMsg]{ClientStream: s}
}

// up opens Up, the client-streaming method.
func (e *flowEnv) up(ctx context.Context, opts ...tunnel.CallOption) *tunnel.GenericClientStream[flowMsg, wrapperspb.Int64Value] {
	return &tunnel.GenericClientStream[flowMsg, wrapperspb.Int64Value]{ClientStream: e.open(ctx, "Up", opts...).ClientStream}
}

func (e *flowEnv) responses() string { return e.keys.Shard(flowService, 0).Responses(flowClientID) }
func (e *flowEnv) inbox() string     { return e.keys.Shard(flowService, 0).Inbox(flowWorkerID) }

// redisHold is what a Redis stream holds of one stream direction: message
// frames sent and not yet consumed by the receiving application, their
// payload bytes, and the whole stream's length and MEMORY USAGE.
type redisHold struct {
	messages, bytes int64
	xlen, memory    int64
}

// held reads what key holds of stream id, counting the messages numbered
// after consumed.
func (e *flowEnv) held(t *testing.T, key, id string, consumed int64) redisHold {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	entries, err := e.rdb.XRange(ctx, key, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", key, err)
	}
	var h redisHold
	for _, en := range entries {
		raw, ok := en.Values[wire.StreamField].(string)
		if !ok {
			continue
		}
		frames, err := wire.DecodeFramesString(raw)
		if err != nil {
			t.Fatalf("entry %s of %s: %v", en.ID, key, err)
		}
		for _, f := range frames {
			if f.ID == id && f.Type == wire.FrameMessage && f.Seq > consumed {
				h.messages++
				h.bytes += int64(len(f.Payload))
			}
		}
	}
	h.xlen = int64(len(entries))
	if n, err := e.rdb.MemoryUsage(ctx, key).Result(); err == nil {
		h.memory = n
	}
	return h
}

// flowCase is one direction and one window to hold a sender to.
type flowCase struct {
	name     string
	window   tunnel.StreamWindow
	size     int   // payload bytes per message (BytesValue value)
	messages int   // sent in all
	ahead    int64 // how many messages the window lets the sender be ahead
}

// bytesAhead is how many messages of size fit a byte window.
func bytesAhead(size int, window int64) int64 {
	m := int64(proto.Size(wrapperspb.Bytes(make([]byte, size))))
	return window / m
}

var flowCases = []flowCase{
	{name: "messages", window: tunnel.StreamWindow{Messages: 8, Bytes: 1 << 20}, size: 100, messages: 60, ahead: 8},
	{name: "bytes", window: tunnel.StreamWindow{Messages: 1000, Bytes: 64 << 10}, size: 10 << 10, messages: 40, ahead: bytesAhead(10<<10, 64<<10)},
}

// counter is what one side has done, shared with the test.
type counter struct{ n, bytes atomic.Int64 }

func (c *counter) add(m *flowMsg) {
	c.bytes.Add(int64(proto.Size(m)))
	c.n.Add(1)
}

// stalled checks that the sender is a whole window ahead and stays there
// while nothing is consumed: its Send blocks.
func stalled(t *testing.T, sent *counter, consumed, ahead int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the sender to fill the window (%d ahead of %d consumed)", ahead, consumed), func() bool {
		return sent.n.Load() >= consumed+ahead
	})
	time.Sleep(300 * time.Millisecond) // room to run past the window, were it not held
	if got := sent.n.Load(); got != consumed+ahead {
		t.Fatalf("sender sent %d messages with %d consumed, want exactly %d (window %d)", got, consumed, consumed+ahead, ahead)
	}
}
