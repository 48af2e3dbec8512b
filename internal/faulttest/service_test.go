package faulttest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

// The fault.v1.Work service, written by hand in the shape protoc-gen-rpr
// generates, so the suite does not depend on gen/. Its two methods do the
// same thing; they differ only in their idempotency, which decides what a
// worker may do with a call whose previous worker died mid-run.
const (
	workService = "fault.v1.Work"
	// bizCode goes into the suite's request ids: 20261129-FLT1-...
	bizCode = "FLT1"

	work_Write_FullMethodName = workService + "/Write"
	work_Read_FullMethodName  = workService + "/Read"
)

// workServer is the server API of fault.v1.Work.
type workServer interface {
	// Write is not idempotent: a call whose worker died mid-run must not
	// run again (the caller gets ABORTED "outcome unknown").
	Write(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
	// Read is idempotent (NO_SIDE_EFFECTS): it may run again elsewhere.
	Read(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

var workInfo = tunnel.ServiceInfo{Name: workService}

var workDesc = tunnel.ServiceDesc{
	Service:     &workInfo,
	HandlerType: (*workServer)(nil),
	Methods: []tunnel.MethodDesc{
		{Service: &workInfo, Name: "Write", Idempotent: false, Handler: _Work_Write_Handler},
		{Service: &workInfo, Name: "Read", Idempotent: true, Handler: _Work_Read_Handler},
	},
	File: "fault/v1/work.proto",
}

var (
	writeMethod = &workDesc.Methods[0]
	readMethod  = &workDesc.Methods[1]
)

func _Work_Write_Handler(srv any, ctx context.Context, decode func(proto.Message) error, interceptor tunnel.UnaryServerInterceptor) (proto.Message, error) {
	in := new(wrapperspb.StringValue)
	if err := decode(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(workServer).Write(ctx, in)
	}
	info := &tunnel.UnaryServerInfo{Server: srv, FullMethod: work_Write_FullMethodName}
	return interceptor(ctx, in, info, func(ctx context.Context, req proto.Message) (proto.Message, error) {
		return srv.(workServer).Write(ctx, req.(*wrapperspb.StringValue))
	})
}

func _Work_Read_Handler(srv any, ctx context.Context, decode func(proto.Message) error, interceptor tunnel.UnaryServerInterceptor) (proto.Message, error) {
	in := new(wrapperspb.StringValue)
	if err := decode(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(workServer).Read(ctx, in)
	}
	info := &tunnel.UnaryServerInfo{Server: srv, FullMethod: work_Read_FullMethodName}
	return interceptor(ctx, in, info, func(ctx context.Context, req proto.Message) (proto.Message, error) {
		return srv.(workServer).Read(ctx, req.(*wrapperspb.StringValue))
	})
}

// Keys of the service as an operator sees them (the runtime builds its own;
// the suite spells them out to inspect Redis).
const (
	requestStream = "rpr:v1:{" + workService + "}:req"
	workersHash   = "rpr:v1:{" + workService + "}:workers"
)

func responseStream(clientID string) string { return "rpr:v1:{" + workService + "}:resp:" + clientID }
func stateKey(requestID string) string      { return "rpr:v1:{" + workService + "}:st:" + requestID }

// The suite's own bookkeeping, written by the handler.
const (
	execsKey = "rprtest:execs" // hash: request id -> number of executions
	runsKey  = "rprtest:runs"  // list of "start|done|stop <worker> <request id>"
)

// work implements workServer. Each call records its execution (the one
// side effect that counts), then sleeps for the duration in the request
// value ("500ms") unless its context ends first, then answers its own
// request id.
type work struct {
	// rec is a connection of its own to the same Redis, so the
	// bookkeeping never shares a pool with the runtime under test.
	rec    redis.UniversalClient
	worker string
	log    *slog.Logger
}

// newRecorder connects the bookkeeping client. It never retries a command:
// a retried HINCRBY whose first try had landed would count an execution
// twice.
func newRecorder(url string) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opts.MaxRetries = -1
	opts.ReadTimeout = 10 * time.Second // outlasts a CLIENT PAUSE
	opts.PoolSize = 64
	return redis.NewClient(opts), nil
}

func (w *work) Write(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return w.run(ctx, in)
}

func (w *work) Read(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return w.run(ctx, in)
}

func (w *work) run(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	rid := tunnel.RequestIDFromContext(ctx)
	if rid == "" {
		return nil, tunnel.Errorf(tunnel.Internal, "no request id in the handler's context")
	}
	d, err := time.ParseDuration(in.GetValue())
	if err != nil {
		return nil, tunnel.Errorf(tunnel.InvalidArgument, "request value %q is not a duration: %v", in.GetValue(), err)
	}
	// The record outlives the call's context: it is bookkeeping, and an
	// execution that started must be counted whatever happens next.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	pipe := w.rec.TxPipeline()
	pipe.HIncrBy(rctx, execsKey, rid, 1)
	pipe.RPush(rctx, runsKey, "start "+w.worker+" "+rid)
	if _, err := pipe.Exec(rctx); err != nil {
		// Nothing ran (or the count landed and only its reply was lost, in
		// which case the books say it ran, which is the safe side).
		return nil, tunnel.Errorf(tunnel.Unavailable, "[%s] record execution: %v", rid, err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		w.note(rctx, "stop", rid)
		return nil, tunnel.NewError(tunnel.CodeOf(ctx.Err()), ctx.Err())
	}
	w.note(rctx, "done", rid)
	return wrapperspb.String(rid), nil
}

func (w *work) note(ctx context.Context, event, rid string) {
	if err := w.rec.RPush(ctx, runsKey, event+" "+w.worker+" "+rid).Err(); err != nil && w.log != nil {
		w.log.Warn("faulttest: record "+event, "request_id", rid, "error", err)
	}
}

// runEvent is one entry of runsKey.
type runEvent struct {
	event  string // start, done or stop
	worker string
	rid    string
}

func parseRuns(lines []string) ([]runEvent, error) {
	out := make([]runEvent, 0, len(lines))
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 {
			return nil, fmt.Errorf("malformed run record %q", l)
		}
		out = append(out, runEvent{event: f[0], worker: f[1], rid: f[2]})
	}
	return out, nil
}

// runIndex summarises run records per request id.
type runIndex struct {
	started  map[string][]string // rid -> workers that started it, in order
	finished map[string][]string // rid -> workers that got to done or stop
}

func indexRuns(events []runEvent) runIndex {
	ix := runIndex{started: map[string][]string{}, finished: map[string][]string{}}
	for _, e := range events {
		switch e.event {
		case "start":
			ix.started[e.rid] = append(ix.started[e.rid], e.worker)
		case "done", "stop":
			ix.finished[e.rid] = append(ix.finished[e.rid], e.worker)
		}
	}
	return ix
}

// interrupted returns the ids worker started but never finished: the
// handlers running on it when it died.
func (ix runIndex) interrupted(worker string) map[string]bool {
	out := map[string]bool{}
	for rid, ws := range ix.started {
		n := 0
		for _, w := range ws {
			if w == worker {
				n++
			}
		}
		for _, w := range ix.finished[rid] {
			if w == worker {
				n--
			}
		}
		if n > 0 {
			out[rid] = true
		}
	}
	return out
}

// startsOn counts how often worker started rid.
func (ix runIndex) startsOn(rid, worker string) int {
	n := 0
	for _, w := range ix.started[rid] {
		if w == worker {
			n++
		}
	}
	return n
}
