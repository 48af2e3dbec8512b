package compilecheck

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/rprtunnel/rpr/tunnel"
	"google.golang.org/protobuf/proto"
)

// NewStream makes fakeConn a whole tunnel.ClientConn: it connects the
// caller to f.impl through a pipe, in process, running the method's
// generated StreamHandler as a server would.
func (f *fakeConn) NewStream(ctx context.Context, method *tunnel.MethodDesc, _ ...tunnel.CallOption) (tunnel.ClientStream, error) {
	f.calls = append(f.calls, method.FullMethod())
	if f.t == nil || method.StreamHandler == nil {
		return nil, tunnel.Errorf(tunnel.Internal, "fakeConn: no test to stream %s in, or no stream handler", method.FullMethod())
	}
	return startPipe(ctx, f.t, method, f.impl), nil
}

// pipe is a streaming call in process: a fake tunnel.ClientStream (the
// caller's side) and a fake tunnel.ServerStream (the handler's side).
// Messages cross it marshalled, as over the wire, one at a time and in
// order; the handler runs in a goroutine the pipe owns, and the error it
// returns is the stream's status, which the caller's RecvMsg returns after
// the last message (io.EOF for nil). As in grpc-go, the caller's RecvMsg of
// the one reply of a method whose server does not stream waits for the end
// of the stream, so that the trailer and a later error are there when
// CloseAndRecv returns.
type pipe struct {
	ctx      context.Context
	cancel   context.CancelFunc
	oneReply bool        // the server does not stream
	toServer chan []byte // closed by CloseSend
	toClient chan []byte // closed once the handler has returned
	done     chan struct{}
	status   error // the handler's error, set before done is closed

	sendClosed bool // the caller called CloseSend; only the sender uses it

	mu         sync.Mutex
	header     tunnel.Metadata
	headerSent chan struct{}
	headerOnce sync.Once
	trailer    tunnel.Metadata
}

// startPipe starts the stream handler of method with impl on a new pipe
// and returns the caller's side. The test's cleanup cancels the stream and
// waits for the handler.
func startPipe(ctx context.Context, t *testing.T, method *tunnel.MethodDesc, impl any) *clientSide {
	ctx, cancel := context.WithCancel(ctx)
	p := &pipe{
		ctx:        ctx,
		cancel:     cancel,
		oneReply:   !method.ServerStreams,
		toServer:   make(chan []byte),
		toClient:   make(chan []byte),
		done:       make(chan struct{}),
		header:     tunnel.Metadata{},
		headerSent: make(chan struct{}),
		trailer:    tunnel.Metadata{},
	}
	go func() {
		p.status = method.StreamHandler(impl, &serverSide{p})
		p.sendHeader()
		close(p.done) // the status and trailer are set
		close(p.toClient)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return &clientSide{p}
}

func (p *pipe) sendHeader() { p.headerOnce.Do(func() { close(p.headerSent) }) }

// clientSide is the caller's side of a pipe.
type clientSide struct{ *pipe }

var _ tunnel.ClientStream = (*clientSide)(nil)

func (c *clientSide) Context() context.Context { return c.ctx }

func (c *clientSide) Header() (tunnel.Metadata, error) {
	select {
	case <-c.headerSent:
	case <-c.ctx.Done():
		return nil, c.ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.header.Clone(), nil
}

func (c *clientSide) Trailer() tunnel.Metadata {
	select {
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.trailer.Clone()
	default:
		return nil
	}
}

func (c *clientSide) SendMsg(m proto.Message) error {
	if c.sendClosed {
		return errors.New("fake ClientStream: SendMsg after CloseSend")
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	select {
	case c.toServer <- b:
		return nil
	case <-c.done: // the stream ended; RecvMsg says why
		return io.EOF
	case <-c.ctx.Done():
		return io.EOF
	}
}

func (c *clientSide) CloseSend() error {
	if !c.sendClosed {
		c.sendClosed = true
		close(c.toServer)
	}
	return nil
}

func (c *clientSide) RecvMsg(m proto.Message) error {
	select {
	case b, ok := <-c.toClient:
		if !ok {
			if c.status == nil {
				return io.EOF
			}
			return c.status
		}
		if err := proto.Unmarshal(b, m); err != nil || !c.oneReply {
			return err
		}
		select {
		case <-c.done:
			return c.status
		case <-c.ctx.Done():
			return tunnel.Errorf(tunnel.Canceled, "fake ClientStream: %v", c.ctx.Err())
		}
	case <-c.ctx.Done():
		return tunnel.Errorf(tunnel.Canceled, "fake ClientStream: %v", c.ctx.Err())
	}
}

// serverSide is the handler's side of a pipe.
type serverSide struct{ *pipe }

var _ tunnel.ServerStream = (*serverSide)(nil)

func (s *serverSide) Context() context.Context { return s.ctx }

func (s *serverSide) SetHeader(md tunnel.Metadata) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range md {
		s.header.Add(k, v...)
	}
	return nil
}

func (s *serverSide) SendHeader(md tunnel.Metadata) error {
	err := s.SetHeader(md)
	s.sendHeader()
	return err
}

func (s *serverSide) SetTrailer(md tunnel.Metadata) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range md {
		s.trailer.Add(k, v...)
	}
}

func (s *serverSide) SendMsg(m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	s.sendHeader()
	select {
	case s.toClient <- b:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

func (s *serverSide) RecvMsg(m proto.Message) error {
	select {
	case b, ok := <-s.toServer:
		if !ok {
			return io.EOF
		}
		return proto.Unmarshal(b, m)
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}
