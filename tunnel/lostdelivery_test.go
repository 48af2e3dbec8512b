package tunnel_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestLostDeliveryIsNotNotExecuted plays, step by step, the failover that
// once made a Sentinel test report a call "not executed" although it ran:
// a replica is promoted while holding a request that its old master has
// not yet handed out, the old master then hands it to a worker, which
// runs it, and the caller, whose deadline passes, settles the request on
// the promoted replica, which has no record of the delivery. That caller
// must not be told the request did not run: it is told it may have.
func TestLostDeliveryIsNotNotExecuted(t *testing.T) {
	t.Parallel() // most of it is a wait for a deadline
	ctx := context.Background()
	master, replica := redistest.Start(t), redistest.Start(t)
	admin, radmin := master.Client(t), replica.Client(t)
	if err := radmin.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(master.Port())).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replica to sync", func() bool {
		return strings.Contains(radmin.Info(ctx, "replication").Val(), "master_link_status:up")
	})

	// The caller reaches whichever node target names, as a Sentinel
	// client follows the master it is told of.
	var target atomic.Value
	target.Store(master.Addr())
	var dialer net.Dialer
	callerRdb := redis.NewClient(&redis.Options{ClientName: "lost-delivery-caller",
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, target.Load().(string))
		}})
	t.Cleanup(func() { _ = callerRdb.Close() })

	h := &blockingHandler{started: map[string]chan struct{}{"first": make(chan struct{}), "second": make(chan struct{})}, release: make(chan struct{}), ran: executions{n: map[string]int{}}}
	desc := h.desc()
	startServer(t, master.Client(t), tunnel.ServerOptions{Concurrency: 1}, func(s *tunnel.Server) { s.RegisterService(desc, h) })
	client, err := tunnel.NewClient(callerRdb, tunnel.ClientOptions{Breaker: tunnel.BreakerOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	m := &desc.Methods[0]
	waitFor(t, "the server to answer", func() bool {
		return client.Invoke(ctx, m, wrapperspb.String("warm"), new(wrapperspb.StringValue)) == nil
	})

	// The one handler slot is taken, so the second request waits in the
	// stream, undelivered, until the replica is promoted.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer h.unblock()
	wg.Go(func() { _ = client.Invoke(ctx, m, wrapperspb.String("first"), new(wrapperspb.StringValue)) })
	<-h.started["first"]
	second := make(chan error, 1)
	wg.Go(func() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		second <- client.Invoke(cctx, m, wrapperspb.String("second"), new(wrapperspb.StringValue))
	})
	stream := "rpr:v1:{" + h.name() + "}:req"
	waitFor(t, "the second request to reach the replica", func() bool { return radmin.XLen(ctx, stream).Val() == 2 })
	if err := radmin.ReplicaOf(ctx, "no", "one").Err(); err != nil {
		t.Fatal(err)
	}

	// The old master, not knowing, hands the second request to the
	// worker; then the caller follows the promoted replica.
	h.unblock()
	<-h.started["second"]
	target.Store(replica.Addr())
	killClients(t, admin, "lost-delivery-caller")

	err = <-second
	if h.ran.count("second") != 1 {
		t.Fatalf("the second request ran %d times, want once", h.ran.count("second"))
	}
	if tunnel.NotExecuted(err) || tunnel.CodeOf(err) != tunnel.DeadlineExceeded {
		t.Fatalf("the second call got %v (not executed: %v), want DEADLINE_EXCEEDED that may have run", err, tunnel.NotExecuted(err))
	}
	if !strings.Contains(err.Error(), "failed over or restarted") {
		t.Errorf("the error does not say why it may have run: %v", err)
	}
}

// killClients closes every connection named name on the Redis of rdb.
func killClients(t *testing.T, rdb *redis.Client, name string) {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(list, "\n") {
		if !strings.Contains(line, " name="+name+" ") {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
		if err := rdb.Do(context.Background(), "CLIENT", "KILL", "ID", id).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// blockingHandler is a unary method whose handler records each run of
// its payload and, for the payloads in started, announces the run and
// waits: "first" until release, the others until their deadline.
type blockingHandler struct {
	started map[string]chan struct{}
	release chan struct{}
	once    sync.Once
	ran     executions
}

func (h *blockingHandler) name() string { return "test.v1.LostDelivery" }

func (h *blockingHandler) unblock() { h.once.Do(func() { close(h.release) }) }

func (h *blockingHandler) desc() *tunnel.ServiceDesc {
	info := &tunnel.ServiceInfo{Name: h.name()}
	return &tunnel.ServiceDesc{Service: info, Methods: []tunnel.MethodDesc{{
		Service: info, Name: "Do",
		Handler: func(_ any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
			in := new(wrapperspb.StringValue)
			if err := decode(in); err != nil {
				return nil, err
			}
			v := in.GetValue()
			h.ran.add(v)
			started, ok := h.started[v]
			if !ok {
				return in, nil
			}
			close(started)
			if v == "first" {
				<-h.release
			} else {
				<-ctx.Done()
			}
			return in, nil
		},
	}}}
}
