package tunnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// The rolling-deploy service: release 1 has Old, release 2 adds New (unary)
// and NewJob (async).
const rollingService = "test.v1.Rolling"

var rollingInfo = tunnel.ServiceInfo{Name: rollingService}

type rollingImpl struct {
	release string
	runs    atomic.Int64
	jobs    sync.Map // value -> executions (*atomic.Int64)
}

func rollingUnary(name string) tunnel.MethodDesc {
	return tunnel.MethodDesc{Service: &rollingInfo, Name: name,
		Handler: func(impl any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
			in := new(wrapperspb.StringValue)
			if err := decode(in); err != nil {
				return nil, err
			}
			r := impl.(*rollingImpl)
			r.runs.Add(1)
			return wrapperspb.String(r.release + ":" + in.GetValue()), nil
		}}
}

func rollingJob(name string) tunnel.MethodDesc {
	return tunnel.MethodDesc{Service: &rollingInfo, Name: name, Async: true,
		Handler: func(impl any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
			in := new(wrapperspb.StringValue)
			if err := decode(in); err != nil {
				return nil, err
			}
			n, _ := impl.(*rollingImpl).jobs.LoadOrStore(in.GetValue(), new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			return &emptypb.Empty{}, nil
		}}
}

func rollingDesc(methods ...tunnel.MethodDesc) *tunnel.ServiceDesc {
	return &tunnel.ServiceDesc{Service: &rollingInfo, Methods: methods}
}

// TestRollingDeployNeverFailsCalls runs release 1 (Old) and release 2
// (Old, New, NewJob) side by side in one lane, with load on the methods
// only release 2 has: none fails and nothing is dead-lettered, because a
// release-1 worker hands such requests to the release-2 one. Once
// release 2 is gone, New is UNIMPLEMENTED at once.
func TestRollingDeployNeverFailsCalls(t *testing.T) {
	rs := redistest.Start(t)
	quiet := slog.New(slog.DiscardHandler)
	v1, v2 := &rollingImpl{release: "v1"}, &rollingImpl{release: "v2"}
	startServer(t, rs.Client(t), tunnel.ServerOptions{WorkerID: "release-1", Logger: quiet}, func(s *tunnel.Server) {
		s.RegisterService(rollingDesc(rollingUnary("Old")), v1)
	})
	_, stopV2 := startServer(t, rs.Client(t), tunnel.ServerOptions{WorkerID: "release-2", Logger: quiet}, func(s *tunnel.Server) {
		s.RegisterService(rollingDesc(rollingUnary("Old"), rollingUnary("New"), rollingJob("NewJob")), v2)
	})
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	newMethod := rollingDesc(rollingUnary("New")).Methods[0]
	jobMethod := rollingDesc(rollingJob("NewJob")).Methods[0]
	ctx := context.Background()
	rdb := rs.Client(t)
	waitFor(t, "both releases to be live", func() bool {
		return rdb.HLen(ctx, "rpr:v1:{"+rollingService+"}:workers").Val() == 2
	})

	const callers, calls, jobs = 8, 50, 200
	var failed atomic.Int64
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range calls {
				out := new(wrapperspb.StringValue)
				err := client.Invoke(ctx, &newMethod, wrapperspb.String(fmt.Sprint(c, "-", i)), out)
				if err != nil || out.GetValue() != fmt.Sprint("v2:", c, "-", i) {
					failed.Add(1)
					t.Errorf("New call: %q, %v", out.GetValue(), err)
				}
			}
		})
	}
	for i := range jobs {
		if _, err := client.Enqueue(ctx, &jobMethod, wrapperspb.String(fmt.Sprint("job-", i))); err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	}
	wg.Wait()
	waitFor(t, "every job to run", func() bool {
		n := 0
		v2.jobs.Range(func(_, _ any) bool { n++; return true })
		return n == jobs
	})
	v2.jobs.Range(func(k, v any) bool {
		if n := v.(*atomic.Int64).Load(); n != 1 {
			t.Errorf("%s ran %d times", k, n)
		}
		return true
	})
	if got := v2.runs.Load(); got != callers*calls || failed.Load() != 0 {
		t.Errorf("release 2 ran New %d times for %d calls; %d failed", got, callers*calls, failed.Load())
	}
	if n, err := rdb.XLen(ctx, "rpr:v1:{"+rollingService+"}:dlq").Result(); err != nil || n != 0 {
		t.Errorf("%d dead letters", n)
	}

	stopV2()
	out := new(wrapperspb.StringValue)
	err = client.Invoke(ctx, &newMethod, wrapperspb.String("late"), out, tunnel.WithTimeout(5*time.Second))
	if tunnel.CodeOf(err) != tunnel.Unimplemented {
		t.Errorf("New with only release 1 live: %v, want UNIMPLEMENTED", err)
	}
}
