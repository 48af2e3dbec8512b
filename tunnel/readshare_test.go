package tunnel_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestQuietQueueHoldsNoOtherQueuesSlots: a server of two services with
// two handler slots answers calls to one while the other is idle. Before,
// the idle service's reader took both slots into its blocking read (up
// to a second), so calls to the busy one waited for it.
func TestQuietQueueHoldsNoOtherQueuesSlots(t *testing.T) {
	rs := redistest.Start(t)
	quiet := slog.New(slog.DiscardHandler)
	idle, busy := echoServiceDesc("test.v1.Idle", 0), echoServiceDesc("test.v1.Busy", 0)
	startServer(t, rs.Client(t), tunnel.ServerOptions{Concurrency: 2, Logger: quiet}, func(s *tunnel.Server) {
		s.RegisterService(idle, struct{}{})
		s.RegisterService(busy, struct{}{})
	})
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	rdb := rs.Client(t)
	waitFor(t, "the server live", func() bool { return rdb.HLen(ctx, "rpr:v1:{test.v1.Busy}:workers").Val() == 1 })
	failed := 0
	for i := range 20 {
		out := new(wrapperspb.StringValue)
		// The deadline is far above a call's time, and below the idle
		// reader's block (a second).
		if err := client.Invoke(ctx, &busy.Methods[0], wrapperspb.String("x"), out, tunnel.WithTimeout(500*time.Millisecond)); err != nil {
			failed++
			t.Logf("call %d: %v", i, err)
		}
	}
	if failed > 0 {
		t.Errorf("%d of 20 calls to the busy service failed while the idle one's reader held the slots", failed)
	}
}
