package egress

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/grpcraw"
	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	tunnelv1 "github.com/rprtunnel/rpr/gen/rpr/tunnel/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

// grpcForwarder serves rpr.tunnel.v1.GRPC: each call goes to the gRPC
// upstream that the route of its method (header rpr-grpc-method) names,
// over one cached connection per upstream, its messages relayed as they
// are (grpcraw.Codec). Every method is opened upstream as a
// bidirectional stream, which is what every gRPC method is on the wire:
// Call sends its one message and closes, Stream relays the caller's
// messages as they come.
type grpcForwarder struct {
	tunnelv1.UnimplementedGRPCServer
	opts   Options
	limits limits
	conns  *upstreamConns
	// relays are the goroutines of Stream calls that carry the caller's
	// messages upstream. One outlives its call by as long as the rpr
	// stream takes to notice the end (its RecvMsg returns when the
	// handler's context ends), and close waits for them.
	relays sync.WaitGroup
}

func newGRPCForwarder(opts Options) *grpcForwarder {
	return &grpcForwarder{opts: opts, conns: newUpstreamConns(opts.TLS)}
}

// close waits for the relays of ended calls and closes the upstream
// connections; call it once the tunnel server has stopped.
func (f *grpcForwarder) close() {
	f.relays.Wait()
	f.conns.close()
}

// anyMethod opens every method upstream: a stream both ways carries
// unary, server-, client- and bidirectional-streaming calls alike.
var anyMethod = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// Call implements tunnelv1.GRPCServer: a call whose caller sent one
// message and closed its side (unary and server-streaming methods).
func (f *grpcForwarder) Call(in *tunnelv1.CallRequest, stream tunnelv1.GRPC_CallServer) error {
	up, err := f.open(stream.Context())
	if err != nil {
		return err
	}
	defer up.done()
	// A failed send ends the upstream call; RecvMsg (in relay) says how.
	if err := up.cs.SendMsg(in.GetData()); err == nil {
		_ = up.cs.CloseSend()
	}
	return up.relay(stream, func(data []byte) error {
		return stream.Send(&tunnelv1.CallResponse{Data: data})
	})
}

// Stream implements tunnelv1.GRPCServer: any call, its caller's messages
// relayed upstream as they arrive, concurrently with the responses.
func (f *grpcForwarder) Stream(stream tunnelv1.GRPC_StreamServer) error {
	up, err := f.open(stream.Context())
	if err != nil {
		return err
	}
	defer up.done()
	f.relays.Go(func() { up.relayCaller(stream) })
	return up.relay(stream, func(data []byte) error {
		return stream.Send(&tunnelv1.StreamResponse{Data: data})
	})
}

// upstreamCall is one call forwarded upstream, holding a slot of its
// route's upstream and a reference to its connection until done.
type upstreamCall struct {
	f       *grpcForwarder
	route   *upstream.Route
	method  string
	cs      grpc.ClientStream
	track   *callTrack
	cancel  context.CancelFunc
	release func()
	// callerErr is why the caller's side broke, when it did (a message
	// over the size limit, say): the call's status, rather than the
	// cancellation it causes upstream.
	callerErr atomic.Pointer[error]
}

// open matches the call's method against the table, waits for a slot of
// the route's upstream and opens the call there, with the caller's
// metadata, the request id and the trace context of ctx (the rpr server
// span, so the upstream's span is its child), bounded by ctx's deadline
// (the rpr caller's).
func (f *grpcForwarder) open(ctx context.Context) (*upstreamCall, error) {
	header := tunnel.HeaderFromContext(ctx)
	method := header.Get(grpcraw.MethodHeader)
	if !validMethod(method) {
		return nil, tunnel.Errorf(tunnel.InvalidArgument,
			"rpr egress: header %s is %q: want the call's full method, /package.Service/Method (rpr ingress sets it; an rpr caller of rpr.tunnel.v1.GRPC must too)", grpcraw.MethodHeader, method)
	}
	authority := header.Get(grpcraw.AuthorityHeader)
	table := f.opts.GRPCRoutes()
	route, ok := table.Match(authority, method)
	if !ok {
		return nil, noRoute(authority, method)
	}
	md, err := grpcraw.ToGRPC(header)
	if err != nil {
		return nil, tunnel.Errorf(tunnel.InvalidArgument, "rpr egress: route %s: %v", route.Name, err)
	}
	if id := tunnel.RequestIDFromContext(ctx); id != "" {
		md.Set(grpcraw.RequestIDKey, id)
	}
	md.Set(grpcraw.HopsKey, upstream.NextHops(header.Get(grpcraw.HopsKey)))
	f.opts.Propagator.Inject(ctx, grpcraw.Carrier(md))

	release, err := f.limits.acquire(ctx, route)
	if err != nil {
		return nil, err
	}
	conn, err := f.conns.get(table, route)
	if err != nil {
		release()
		return nil, upstreamError(route, false, tunnel.Errorf(tunnel.Unavailable, "rpr egress: route %s: %v; not sent", route.Name, err))
	}
	up := &upstreamCall{f: f, route: route, method: method, track: new(callTrack)}
	up.release = func() { f.conns.put(conn); release() }
	callCtx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, md))
	up.cancel = cancel
	opts := []grpc.CallOption{
		grpc.ForceCodecV2(grpcraw.Codec{}),
		// rpr bounds the messages (the tunnel server's MaxRequestBytes
		// and MaxResponseBytes), up to what a route may allow.
		grpc.MaxCallRecvMsgSize(upstream.MaxBodyLimit),
		grpc.MaxCallSendMsgSize(upstream.MaxBodyLimit),
	}
	if sub := header.Get(grpcraw.ContentSubtypeHeader); sub != "" {
		opts = append(opts, grpc.CallContentSubtype(sub))
	}
	up.cs, err = conn.cc.NewStream(withTrack(callCtx, up.track), anyMethod, method, opts...)
	if err != nil {
		// Nothing left for the upstream: gRPC opens a call with its first
		// write, and fails fast while the upstream cannot be reached.
		up.done()
		return nil, f.failed(ctx, route, method, false, err)
	}
	return up, nil
}

// validMethod reports whether m is "/package.Service/Method".
func validMethod(m string) bool {
	rest, ok := strings.CutPrefix(m, "/")
	if !ok {
		return false
	}
	svc, name, ok := strings.Cut(rest, "/")
	return ok && svc != "" && name != "" && !strings.Contains(name, "/")
}

// done ends the upstream call (if it is still going) and gives back its
// slot and connection.
func (up *upstreamCall) done() {
	up.cancel()
	up.release()
}

// relay sends the upstream's header, messages (through send), trailer
// and status to the rpr caller on stream, and returns the status: the
// upstream's own, exactly, or what kept the call from getting one.
func (up *upstreamCall) relay(stream tunnel.ServerStream, send func([]byte) error) error {
	// Header returns nil for a call that ended without one (a
	// trailers-only answer): the caller then gets none either.
	if md, _ := up.cs.Header(); len(md) > 0 {
		if h := grpcraw.ToTunnel(md); len(h) > 0 {
			if err := stream.SendHeader(h); err != nil {
				return err
			}
		}
	}
	for {
		var data []byte
		if err := up.cs.RecvMsg(&data); err != nil {
			return up.end(stream, err)
		}
		if err := send(data); err != nil {
			return err // the caller is gone, or the message is over rpr's limit
		}
	}
}

// end turns the upstream call's end (RecvMsg's error) into the rpr
// call's status, after passing on the trailer.
func (up *upstreamCall) end(stream tunnel.ServerStream, err error) error {
	if t := up.cs.Trailer(); len(t) > 0 {
		stream.SetTrailer(grpcraw.ToTunnel(t))
	}
	if p := up.callerErr.Load(); p != nil {
		return *p
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	if up.track.answered.Load() {
		return grpcraw.Error(status.Convert(err))
	}
	// gRPC made this status, not the upstream: the connection broke, or
	// the deadline passed, after the call was opened.
	return up.f.failed(stream.Context(), up.route, up.method, true, err)
}

// relayCaller sends the rpr caller's messages upstream until the caller
// closes its side (CloseSend upstream) or its side breaks (the upstream
// call is cancelled, with the reason kept for end).
func (up *upstreamCall) relayCaller(stream tunnelv1.GRPC_StreamServer) {
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			_ = up.cs.CloseSend()
			return
		}
		if err != nil {
			if stream.Context().Err() == nil {
				up.callerErr.Store(&err)
			}
			up.cancel()
			return
		}
		if err := up.cs.SendMsg(m.GetData()); err != nil {
			return // the upstream call ended: relay reports how
		}
	}
}

// failed explains a call that got no status from the upstream: it could
// not be reached, the connection broke, or the deadline passed first.
func (f *grpcForwarder) failed(ctx context.Context, route *upstream.Route, method string, sent bool, err error) error {
	f.opts.Log.Warn("rpr egress: upstream call failed", "route", route.Name, "upstream", route.Upstream, "method", method, "sent", sent, "error", err, "request_id", tunnel.RequestIDFromContext(ctx))
	outcome := "it was not sent"
	if sent {
		outcome = "the upstream may have received it"
	}
	if ctx.Err() != nil {
		return upstreamError(route, sent, tunnel.Errorf(tunnel.CodeOf(ctx.Err()),
			"rpr egress: route %s: no answer from %s within the deadline; %s", route.Name, route.Upstream, outcome))
	}
	st := status.Convert(err)
	return upstreamError(route, sent, tunnel.Errorf(tunnel.Code(st.Code()),
		"rpr egress: route %s: %s: %s; %s", route.Name, route.Upstream, st.Message(), outcome))
}
