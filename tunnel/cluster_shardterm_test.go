package tunnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/internal/logcapture"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// heldService is a unary service whose "block" request holds the
// server's one handler slot until the test releases it.
const heldService = "test.v1.Held"

// heldServer counts the runs of each value and blocks on "block".
type heldServer struct {
	started chan struct{} // closed when "block" starts
	release chan struct{} // closed by the test to end "block"
	mu      sync.Mutex
	runs    map[string]int
}

func (h *heldServer) run(value string) {
	h.mu.Lock()
	h.runs[value]++
	h.mu.Unlock()
	if value == "block" {
		close(h.started)
		<-h.release
	}
}

func (h *heldServer) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for v, runs := range h.runs {
		if strings.HasPrefix(v, prefix) {
			n += runs
		}
	}
	return n
}

func heldDesc() *tunnel.ServiceDesc {
	info := &tunnel.ServiceInfo{Name: heldService, Shards: 1}
	wait := tunnel.MethodDesc{
		Service: info, Name: "Wait",
		Handler: func(impl any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
			in := new(wrapperspb.StringValue)
			if err := decode(in); err != nil {
				return nil, err
			}
			impl.(*heldServer).run(in.GetValue())
			return in, nil
		},
	}
	return &tunnel.ServiceDesc{Service: info, Methods: []tunnel.MethodDesc{wait}}
}

// TestShardRaiseKnowsTheNewShardsMasters: a client that follows a raise of
// a Cluster service's shard count knows which master holds each new shard
// before it sends there, so a call that waited in a new shard's queue past
// its deadline is reported not executed. Before, until the client's next
// refresh a second later, such a call was reported "whether it was
// executed is unknown (Redis failed over or restarted ...)" although
// nothing failed over (seen in TestACLRolesOnShardedServiceInCluster).
func TestShardRaiseKnowsTheNewShardsMasters(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t)
	ctx := context.Background()
	held := &heldServer{started: make(chan struct{}), release: make(chan struct{}), runs: map[string]int{}}
	desc := heldDesc()
	startServer(t, mustOpen(t, ctx, cluster.URL()), tunnel.ServerOptions{Concurrency: 1, Logger: slog.New(slog.DiscardHandler)},
		func(s *tunnel.Server) { s.RegisterService(desc, held) })
	logs := &logcapture.Buffer{}
	client, err := tunnel.NewClient(mustOpen(t, ctx, cluster.URL()), tunnel.ClientOptions{
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		// The calls given up on purpose would open it and refuse the rest.
		Breaker: tunnel.BreakerOptions{Disabled: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	call := func(ctx context.Context, value string) error {
		return client.Invoke(ctx, &desc.Methods[0], wrapperspb.String(value), new(wrapperspb.StringValue))
	}
	waitFor(t, "the server to answer", func() bool { return call(ctx, "ping") == nil })

	// The one slot is held (the request went to shard 0, the only one),
	// so from now on nothing is read from any shard.
	blocked := make(chan error, 1)
	go func() {
		bctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		blocked <- call(bctx, "block")
	}()
	<-held.started
	if err := admin.New(mustOpen(t, ctx, cluster.URL()), admin.Options{}).Service(heldService).SetShards(ctx, 3); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the client to follow the raise", func() bool { return len(logs.Lines("shards=3")) > 0 })

	// At once, within the refresh interval: 12 calls spread over the
	// three shards, each given up in its queue.
	const late = 12
	errs := make(chan error, late)
	for i := range late {
		go func() {
			lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			errs <- call(lctx, fmt.Sprintf("late-%d", i))
		}()
	}
	for range late {
		if err := <-errs; tunnel.CodeOf(err) != tunnel.DeadlineExceeded || !tunnel.NotExecuted(err) {
			t.Errorf("a call given up in its queue: %v, want DEADLINE_EXCEEDED, not executed", err)
		}
	}

	close(held.release)
	if err := <-blocked; err != nil {
		t.Fatalf("the blocking call: %v", err)
	}
	for i := range 12 { // every shard read again, once the server follows
		if err := call(ctx, fmt.Sprintf("after-%d", i)); err != nil {
			t.Fatalf("a call after the release: %v", err)
		}
	}
	if n := held.count("late-"); n != 0 {
		t.Errorf("%d of the calls reported not executed ran", n)
	}
	if n, m := held.count("block"), held.count("after-"); n != 1 || m != 12 {
		t.Errorf("runs: block %d, after-* %d; want 1 and 12", n, m)
	}
}
