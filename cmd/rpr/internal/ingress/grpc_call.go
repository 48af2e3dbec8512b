package ingress

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/egress"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/grpcraw"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	tunnelv1 "github.com/rprtunnel/rpr/gen/rpr/tunnel/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

// grpcCall is one gRPC call being relayed through the tunnel.
type grpcCall struct {
	h      *grpcHandler
	ss     grpc.ServerStream
	ctx    context.Context // the call's, ended when the handler returns
	cancel context.CancelFunc
	route  *upstream.Route
	method string
	opts   []tunnel.CallOption
	id     string // the rpr request id, once the rpr call started
	// in hands over what the reader received from the caller.
	in chan received
	// callerErr is why the caller's side broke, when it did (a message
	// over the route's limit): the call's status, rather than the
	// cancellation it causes.
	callerErr atomic.Pointer[error]
}

// received is one result of the caller's stream: a message, or its end
// (io.EOF when the caller closed its side).
type received struct {
	data []byte
	err  error
}

// readCaller reads the caller's messages and hands each to the call,
// until the caller's side ends or the call does. It runs on a goroutine
// of its own, so that the call can wait for a message for a bounded
// time (collect) and relay both ways at once.
func (c *grpcCall) readCaller() {
	for {
		var r received
		r.err = c.ss.RecvMsg(&r.data)
		if r.err == nil && int64(len(r.data)) > c.route.MaxBodyBytes {
			r.err = status.Errorf(codes.ResourceExhausted, "rpr ingress: a message of %s is %d bytes, over route %s's limit of %d (raise it with rpr upstreams set %s --max-body BYTES)",
				c.method, len(r.data), c.route.Name, c.route.MaxBodyBytes, c.route.Name)
		}
		select {
		case c.in <- r:
		case <-c.ctx.Done():
			return
		}
		if r.err != nil {
			return
		}
	}
}

// run sends the call as a Call when its caller sent one message and
// closed within the waits, else as a Stream (see grpcFirstWait).
func (c *grpcCall) run() error {
	first, end := c.collect()
	switch {
	case end != nil && !errors.Is(end, io.EOF):
		return c.callerBroke(end)
	case end != nil && len(first) == 1:
		return c.call(first[0])
	case len(first) > 1 || end != nil:
		c.h.streaming.add(c.method) // two messages, or none and closed
	}
	return c.stream(first, end != nil)
}

// collect waits for the caller's first message (for firstWait at most,
// grace for a method known to stream), then for its end or a second
// message (grace at most). It returns the messages that arrived, and the
// end (io.EOF: the caller closed) if it came.
func (c *grpcCall) collect() ([][]byte, error) {
	known := c.h.streaming.has(c.method)
	wait := c.h.firstWait
	if known {
		wait = c.h.grace
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var msgs [][]byte
	for {
		select {
		case r := <-c.in:
			if r.err != nil {
				return msgs, r.err
			}
			msgs = append(msgs, r.data)
			if known || len(msgs) == 2 {
				return msgs, nil
			}
			timer.Reset(c.h.grace)
		case <-timer.C:
			return msgs, nil
		case <-c.ctx.Done():
			return msgs, c.ctx.Err()
		}
	}
}

// call sends a call whose caller sent one message and closed: the open
// carries the message, and the answers stream back as they come.
func (c *grpcCall) call(data []byte) error {
	c.h.asCall.Add(1)
	rs, err := c.h.client.Call(c.ctx, &tunnelv1.CallRequest{Data: data}, c.opts...)
	if err != nil {
		return c.end(nil, err)
	}
	return c.relay(rs, func() ([]byte, error) {
		m, err := rs.Recv()
		return m.GetData(), err
	})
}

// stream sends any other call: the messages that came already, then the
// rest as they come, while the answers stream back.
func (c *grpcCall) stream(first [][]byte, closed bool) error {
	c.h.asStream.Add(1)
	rs, err := c.h.client.Stream(c.ctx, c.opts...)
	if err != nil {
		return c.end(nil, err)
	}
	// A failed Send means the stream ended: relay says how.
	sent := true
	for _, data := range first {
		if sent = rs.Send(&tunnelv1.StreamRequest{Data: data}) == nil; !sent {
			break
		}
	}
	switch {
	case closed && sent:
		_ = rs.CloseSend()
	case sent:
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.relayCaller(rs, len(first))
		}()
		defer func() {
			c.cancel()
			<-done
		}()
	}
	return c.relay(rs, func() ([]byte, error) {
		m, err := rs.Recv()
		return m.GetData(), err
	})
}

// relayCaller sends the caller's further messages on rs until the caller
// closes its side (CloseSend) or it breaks (the rpr stream is cancelled,
// with the reason kept for end), or the call ends. sent is how many went
// already.
func (c *grpcCall) relayCaller(rs tunnelv1.GRPC_StreamClient, sent int) {
	for {
		select {
		case r := <-c.in:
			switch {
			case errors.Is(r.err, io.EOF):
				_ = rs.CloseSend()
				return
			case r.err != nil:
				if c.ctx.Err() == nil {
					c.callerErr.Store(&r.err)
				}
				c.cancel()
				return
			}
			if sent++; sent == 2 {
				c.h.streaming.add(c.method)
			}
			if err := rs.Send(&tunnelv1.StreamRequest{Data: r.data}); err != nil {
				return // the stream ended: relay says how
			}
		case <-c.ctx.Done():
			return
		}
	}
}

// relay sends rs's header, messages (from recv), trailer and status to
// the caller.
func (c *grpcCall) relay(rs tunnel.ClientStream, recv func() ([]byte, error)) error {
	if h, err := rs.Header(); err == nil && len(h) > 0 {
		if md := c.metadata(h); len(md) > 0 {
			if err := c.ss.SendHeader(md); err != nil {
				return err // the caller is gone
			}
		}
	}
	for {
		data, err := recv()
		if err != nil {
			return c.end(rs, err)
		}
		if err := c.ss.SendMsg(data); err != nil {
			return err // the caller is gone
		}
	}
}

// end sets the call's trailer (the upstream's, the request id, and on an
// rpr failure whether the upstream may have run the call) and returns its
// status: the upstream's exactly, or rpr's own failure. rs is nil when
// the rpr call could not start.
func (c *grpcCall) end(rs tunnel.ClientStream, err error) error {
	trailer := metadata.MD{}
	if rs != nil {
		trailer = c.metadata(rs.Trailer())
	}
	if c.id != "" {
		trailer.Set(grpcraw.RequestIDKey, c.id)
	}
	if p := c.callerErr.Load(); p != nil {
		err = *p
	}
	if errors.Is(err, io.EOF) {
		c.ss.SetTrailer(trailer)
		return nil
	}
	if outcome, ok := outcomeOf(err); ok {
		trailer.Set(grpcraw.OutcomeKey, outcome)
		c.h.log.Warn("rpr ingress: gRPC call failed", "request_id", c.id, "route", c.route.Name, "method", c.method, "outcome", outcome, "error", err)
	}
	c.ss.SetTrailer(trailer)
	if st, ok := status.FromError(err); ok && !isTunnelError(err) {
		return st.Err() // gRPC's own (the caller's side broke)
	}
	return grpcraw.Status(err).Err()
}

// callerBroke ends a call whose caller's side failed before the rpr call
// started: nothing was sent.
func (c *grpcCall) callerBroke(err error) error {
	if c.ctx.Err() != nil {
		return status.FromContextError(c.ctx.Err()).Err()
	}
	return status.Convert(err).Err()
}

// metadata returns the keys of md that cross the tunnel, as gRPC
// metadata; what gRPC would refuse is dropped, and logged.
func (c *grpcCall) metadata(md tunnel.Metadata) metadata.MD {
	out, err := grpcraw.ToGRPC(md)
	if err != nil {
		c.h.log.Warn("rpr ingress: upstream metadata dropped", "request_id", c.id, "method", c.method, "error", err)
		return metadata.MD{}
	}
	return out
}

func isTunnelError(err error) bool {
	var e *tunnel.Error
	return errors.As(err, &e)
}

// outcomeOf says whether the upstream may have run a call that failed in
// rpr (not one the upstream answered with an error): "not executed" when
// rpr can prove it did not. It reports false for the upstream's own
// statuses.
func outcomeOf(err error) (string, bool) {
	if tunnel.NotExecuted(err) {
		return OutcomeNotExecuted, true
	}
	if f, ok := egress.FailureOf(err); ok {
		if f.Reason == egress.ReasonNoRoute || !f.Sent {
			return OutcomeNotExecuted, true
		}
		return OutcomeMayHaveExecuted, true
	}
	return "", false
}
