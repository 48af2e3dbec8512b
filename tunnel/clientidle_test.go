package tunnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// A client whose service has had no call for a while stops reading the
// service's state every second (a pipeline of eight commands); the next
// call reads it first, so it is judged on what is true then: a server
// that left while the client was quiet is known gone at once, and the
// call fails fast with UNAVAILABLE instead of waiting out its deadline.
func TestClientQuietWhenUnused(t *testing.T) {
	t.Parallel() // mostly waiting out quiet spells
	rs := redistest.Start(t)
	quiet := slog.New(slog.DiscardHandler)
	sent := &redisinfo.Sent{}
	clientRDB := rs.Client(t)
	clientRDB.AddHook(sent)
	stop := startEchoServer(t, rs.Client(t), tunnel.ServerOptions{Logger: quiet})
	client := echoClient(t, clientRDB)
	echo := method("Echo")

	// Quiet: over a two-second window, at most the response reader's
	// blocked read (one each five seconds) where a refreshing client
	// sends two pipelines.
	goQuiet := func() {
		var last int64
		waitLong(t, time.Minute, "the unused client to go quiet", func() bool {
			before := sent.RoundTrips()
			time.Sleep(2 * time.Second)
			last = sent.RoundTrips() - before
			return last <= 1
		}, func() string { return fmt.Sprintf("%d round trips in the last two seconds", last) })
	}
	goQuiet()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out wrapperspb.StringValue
	if err := client.Invoke(ctx, echo, wrapperspb.String("after a quiet spell"), &out); err != nil || out.GetValue() != "after a quiet spell" {
		t.Fatalf("a call after a quiet spell: %q, %v", out.GetValue(), err)
	}

	goQuiet()
	stop()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := client.Invoke(ctx, echo, wrapperspb.String("server gone"), new(wrapperspb.StringValue))
	if tunnel.CodeOf(err) != tunnel.Unavailable {
		t.Fatalf("a call after the server left during a quiet spell: %v (%v), want UNAVAILABLE", tunnel.CodeOf(err), err)
	}
}
