package faulttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

// Streaming calls under faults. The service is fault.v1.Feed, hand-written
// like generated code, served by server processes in the role
// "stream-server" (the test binary re-executed, as in main_test.go), with
// one method per kind of stream:
//
//	Tail   (StringValue "n/interval") returns (stream StringValue)
//	       sends "0", "1", ... "n-1", one per interval (n < 0: until the
//	       caller goes), then ends OK
//	Upload (stream StringValue) returns (Int64Value)
//	       takes "0", "1", ... in that order and answers how many it took
//	Echo   (stream StringValue) returns (stream StringValue)
//	       answers each "i" with "echo i", taking them in order
//
// The handlers check the order themselves: a message that is not the next
// number (lost, duplicated or reordered) ends the stream with DATA_LOSS
// naming it. They record in the test's Redis, besides the suite's execs and
// runs (see doc.go):
//
//	HSET rprtest:stream:progress <request-id> <messages taken or sent>
//	HSET rprtest:stream:cause    <request-id> "<unix ms> <why the context ended>"
//
// The progress is written after each message and retried (it is an
// idempotent HSET), so an outage of the recorder's Redis does not end the
// stream: it is what the handler did, as far as the books could keep up.
const (
	feedService = "fault.v1.Feed"

	roleStreamServer = "stream-server"
	roleStreamClient = "stream-client"

	streamProgressKey = "rprtest:stream:progress"
	streamCauseKey    = "rprtest:stream:cause"

	feedWorkers = "rpr:v1:{" + feedService + "}:workers"
)

func feedStateKey(rid string) string { return "rpr:v1:{" + feedService + "}:st:" + rid }
func feedResponses(client string) string {
	return "rpr:v1:{" + feedService + "}:resp:" + client
}
func feedInbox(worker string) string { return "rpr:v1:{" + feedService + "}:in:" + worker }

func init() {
	extraRoles[roleStreamServer] = streamServerRole
	extraRoles[roleStreamClient] = streamClientRole
}

type sv = wrapperspb.StringValue

var feedInfo = tunnel.ServiceInfo{Name: feedService}

var feedDesc = tunnel.ServiceDesc{
	Service: &feedInfo,
	Methods: []tunnel.MethodDesc{
		{Service: &feedInfo, Name: "Tail", ServerStreams: true, StreamHandler: func(impl any, s tunnel.ServerStream) error {
			in := new(sv)
			if err := s.RecvMsg(in); err != nil {
				return err
			}
			return impl.(*feed).tail(in, &tunnel.GenericServerStream[sv, sv]{ServerStream: s})
		}},
		{Service: &feedInfo, Name: "Upload", ClientStreams: true, StreamHandler: func(impl any, s tunnel.ServerStream) error {
			return impl.(*feed).upload(&tunnel.GenericServerStream[sv, wrapperspb.Int64Value]{ServerStream: s})
		}},
		{Service: &feedInfo, Name: "Echo", ClientStreams: true, ServerStreams: true, StreamHandler: func(impl any, s tunnel.ServerStream) error {
			return impl.(*feed).echo(&tunnel.GenericServerStream[sv, sv]{ServerStream: s})
		}},
	},
	File: "fault/v1/feed.proto",
}

var (
	tailMethod   = &feedDesc.Methods[0]
	uploadMethod = &feedDesc.Methods[1]
	echoMethod   = &feedDesc.Methods[2]
)

// feed implements fault.v1.Feed.
type feed struct {
	rec    redis.UniversalClient
	worker string
	log    *slog.Logger
}

// start records an execution; like work.run it never retries (a retried
// HINCRBY would count it twice).
func (f *feed) start(ctx context.Context) (string, error) {
	rid := tunnel.RequestIDFromContext(ctx)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	pipe := f.rec.TxPipeline()
	pipe.HIncrBy(rctx, execsKey, rid, 1)
	pipe.RPush(rctx, runsKey, "start "+f.worker+" "+rid)
	if _, err := pipe.Exec(rctx); err != nil {
		return rid, tunnel.Errorf(tunnel.Unavailable, "[%s] record execution: %v", rid, err)
	}
	return rid, nil
}

// progress records that the handler has taken or sent n messages, retrying
// through an outage for up to a minute.
func (f *feed) progress(ctx context.Context, rid string, n int) {
	f.retry(ctx, "progress", func(ctx context.Context) error {
		return f.rec.HSet(ctx, streamProgressKey, rid, n).Err()
	})
}

// end records how the handler ended: "done" when it returned by itself,
// else "stop" and why its context ended.
func (f *feed) end(ctx context.Context, rid string, err error) {
	event := "done"
	if ctx.Err() != nil {
		event = "stop"
		cause := fmt.Sprintf("%d %v", time.Now().UnixMilli(), context.Cause(ctx))
		f.retry(ctx, "cause", func(rctx context.Context) error { return f.rec.HSet(rctx, streamCauseKey, rid, cause).Err() })
	} else if err != nil {
		event = "fail"
	}
	f.retry(ctx, event, func(rctx context.Context) error { return f.rec.RPush(rctx, runsKey, event+" "+f.worker+" "+rid).Err() })
}

func (f *feed) retry(ctx context.Context, what string, do func(context.Context) error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for {
		err := do(rctx)
		if err == nil || rctx.Err() != nil {
			if err != nil && f.log != nil {
				f.log.Warn("faulttest: record "+what, "error", err)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// next checks that in is message number n.
func next(rid string, in *sv, n int) error {
	if in.GetValue() != strconv.Itoa(n) {
		return tunnel.Errorf(tunnel.DataLoss, "[%s] message %d is %q: lost, duplicated or out of order", rid, n, in.GetValue())
	}
	return nil
}

func (f *feed) tail(in *sv, s tunnel.ServerStreamingServer[sv]) (err error) {
	rid, err := f.start(s.Context())
	if err != nil {
		return err
	}
	defer func() { f.end(s.Context(), rid, err) }()
	countText, intervalText, _ := strings.Cut(in.GetValue(), "/")
	n, err1 := strconv.Atoi(countText)
	interval, err2 := time.ParseDuration(intervalText)
	if err1 != nil || err2 != nil {
		return tunnel.Errorf(tunnel.InvalidArgument, "request %q is not count/interval", in.GetValue())
	}
	for i := 0; n < 0 || i < n; i++ {
		if err := s.Send(wrapperspb.String(strconv.Itoa(i))); err != nil {
			return err
		}
		f.progress(s.Context(), rid, i+1)
		select {
		case <-time.After(interval):
		case <-s.Context().Done():
			return s.Context().Err()
		}
	}
	return nil
}

func (f *feed) upload(s tunnel.ClientStreamingServer[sv, wrapperspb.Int64Value]) (err error) {
	rid, err := f.start(s.Context())
	if err != nil {
		return err
	}
	defer func() { f.end(s.Context(), rid, err) }()
	for n := 0; ; n++ {
		in, err := s.Recv()
		if isEOFErr(err) {
			return s.SendAndClose(wrapperspb.Int64(int64(n)))
		}
		if err != nil {
			return err
		}
		if err := next(rid, in, n); err != nil {
			return err
		}
		f.progress(s.Context(), rid, n+1)
	}
}

func (f *feed) echo(s tunnel.BidiStreamingServer[sv, sv]) (err error) {
	rid, err := f.start(s.Context())
	if err != nil {
		return err
	}
	defer func() { f.end(s.Context(), rid, err) }()
	for n := 0; ; n++ {
		in, err := s.Recv()
		if isEOFErr(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := next(rid, in, n); err != nil {
			return err
		}
		if err := s.Send(wrapperspb.String("echo " + in.GetValue())); err != nil {
			return err
		}
		f.progress(s.Context(), rid, n+1)
	}
}

// streamServerRole serves fault.v1.Feed until SIGTERM.
func streamServerRole() int {
	return runServerRole("stream-server", feedWorkers, tunnel.ServerOptions{},
		func(srv *tunnel.Server, rec *redis.Client, worker string, log *slog.Logger) {
			srv.RegisterService(&feedDesc, &feed{rec: rec, worker: worker, log: log})
		})
}

// Lines the stream client prints: "stream <method> <request id>" for each
// stream it opened, then "calling" once every stream has gone both ways.
const envStreamClientID = "RPR_FAULT_STREAM_CLIENT_ID"

// streamClientRole opens one endless stream of each kind and keeps them
// busy until it is killed (or, as a bound, for two minutes).
func streamClientRole() int {
	log := roleLogger()
	fail := func(format string, args ...any) int {
		log.Error("faulttest stream-client: " + fmt.Sprintf(format, args...))
		return 1
	}
	url, id := os.Getenv(envRedisURL), os.Getenv(envStreamClientID)
	if url == "" || id == "" {
		return fail("%s and %s must be set", envRedisURL, envStreamClientID)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rdb, err := tunnel.Open(ctx, url)
	if err != nil {
		return fail("%v", err)
	}
	defer rdb.Close()
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{ID: id, Logger: log})
	if err != nil {
		return fail("%v", err)
	}
	defer client.Close()
	fmt.Println(markerReady)
	open := func(m *tunnel.MethodDesc) (*tunnel.GenericClientStream[sv, sv], error) {
		var rid string
		s, err := client.NewStream(ctx, m, tunnel.CaptureRequestID(&rid))
		if err != nil {
			return nil, err
		}
		fmt.Printf("stream %s %s\n", m.Name, rid)
		return &tunnel.GenericClientStream[sv, sv]{ClientStream: s}, nil
	}
	tail, err := open(tailMethod)
	if err != nil {
		return fail("open Tail: %v", err)
	}
	if err := tail.Send(wrapperspb.String("-1/50ms")); err != nil {
		return fail("Tail: %v", err)
	}
	if err := tail.CloseSend(); err != nil {
		return fail("Tail: %v", err)
	}
	up, err := open(uploadMethod)
	if err != nil {
		return fail("open Upload: %v", err)
	}
	echo, err := open(echoMethod)
	if err != nil {
		return fail("open Echo: %v", err)
	}
	for i := 0; ctx.Err() == nil; i++ {
		v := wrapperspb.String(strconv.Itoa(i))
		if err := up.Send(v); err != nil {
			return fail("Upload %d: %v", i, err)
		}
		if err := echo.Send(v); err != nil {
			return fail("Echo %d: %v", i, err)
		}
		if _, err := echo.Recv(); err != nil {
			return fail("Echo %d: %v", i, err)
		}
		if _, err := tail.Recv(); err != nil {
			return fail("Tail %d: %v", i, err)
		}
		if i == 3 {
			fmt.Println(markerCalling)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0
}

func isEOFErr(err error) bool { return errors.Is(err, io.EOF) }
