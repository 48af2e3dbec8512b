package tunnel_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// blockInfo is a service whose handlers wait for the test to let them go.
var blockInfo = tunnel.ServiceInfo{Name: "test.v1.Block"}

// blocker lets block's handlers go, one per receive; started counts them in.
type blocker struct {
	started chan struct{}
	release chan struct{}
}

var blockDesc = tunnel.ServiceDesc{Service: &blockInfo, Methods: []tunnel.MethodDesc{{
	Service: &blockInfo, Name: "Wait",
	Handler: func(impl any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
		in := new(wrapperspb.StringValue)
		if err := decode(in); err != nil {
			return nil, err
		}
		b := impl.(*blocker)
		b.started <- struct{}{}
		select {
		case <-b.release:
		case <-ctx.Done():
		}
		return in, nil
	},
}}}

// TestSlowServiceDoesNotStarveAFastOne: a server with 4 handler slots
// serves a service whose handlers hold their slots (they wait for the
// test) and has a backlog of it, and a fast echo service. Once the slow
// service is down to its fair share (2 of 4), the fast one's calls go
// through while the slow handlers still hold theirs: before, the slow
// queue's reader took every slot given back, and the fast calls waited
// for the slow ones to end.
func TestSlowServiceDoesNotStarveAFastOne(t *testing.T) {
	rs := redistest.Start(t)
	b := &blocker{started: make(chan struct{}, 16), release: make(chan struct{})}
	quiet := slog.New(slog.DiscardHandler)
	startServer(t, rs.Client(t), tunnel.ServerOptions{Concurrency: 4, Logger: quiet}, func(s *tunnel.Server) {
		s.RegisterService(&echoDesc, map[string]echoHandler{"Echo": func(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return in, nil
		}})
		s.RegisterService(&blockDesc, b)
	})
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	echo := method("Echo")
	waitAnswered(t, client, echo)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slowDone := make(chan error, 8)
	for range 8 { // 4 to hold every slot, 4 waiting in the queue
		go func() {
			slowDone <- client.Invoke(ctx, &blockDesc.Methods[0], wrapperspb.String("slow"), new(wrapperspb.StringValue), tunnel.WithTimeout(time.Minute))
		}()
	}
	for range 4 {
		<-b.started
	}
	// The fast calls start waiting for a slot; two slow handlers end,
	// and each is followed by one from the backlog, so the slow service
	// keeps holding what it is given until it is down to its share.
	fastDone := make(chan error, 1)
	go func() {
		for i := range 50 {
			if err := client.Invoke(ctx, echo, wrapperspb.String("fast"), new(wrapperspb.StringValue), tunnel.WithTimeout(20*time.Second)); err != nil {
				fastDone <- err
				return
			}
			if i == 0 {
				t.Log("first fast call answered")
			}
		}
		fastDone <- nil
	}()
	for range 2 {
		b.release <- struct{}{}
	}
	if err := <-fastDone; err != nil {
		t.Fatalf("a fast call beside a slow service that holds its slots: %v", err)
	}
	cancel()
	close(b.release)
	for range 8 {
		<-slowDone
	}
}
