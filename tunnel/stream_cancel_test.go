package tunnel_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/tunnel"
)

// cancelAfterPExpire cancels the stream's context right after the client
// set its response stream's expiry: the last Redis command NewStream
// sends before it registers its context.AfterFunc.
type cancelAfterPExpire struct{ cancel context.CancelFunc }

func (h cancelAfterPExpire) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h cancelAfterPExpire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "pexpire" && strings.Contains(cmd.String(), ":resp:") {
			h.cancel()
		}
		return err
	}
}
func (h cancelAfterPExpire) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestNewStreamCancelledWhileOpening: a caller whose context ends just
// before NewStream registers its AfterFunc (here: right after the last
// Redis command NewStream sends).
func TestNewStreamCancelledWhileOpening(t *testing.T) {
	w := newStreamWorld(t)
	w.serve(nil, tunnel.ServerOptions{}, func(s *tunnel.Server) { s.RegisterService(&streamsDesc, defaultStreams()) })
	// Wait until the server beats.
	probe := w.client(nil, tunnel.ClientOptions{})
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := probe.NewStream(context.Background(), streamMethod("Chat"))
		if err == nil {
			_ = s.CloseSend()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: w.redis.Addr(), Dialer: (&net.Dialer{}).DialContext})
	defer rdb.Close()
	rdb.AddHook(cancelAfterPExpire{cancel})
	c, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewStream(ctx, streamMethod("Chat"))
	t.Logf("NewStream: %v", err)
	if err == nil {
		_ = s.CloseSend()
	}
	time.Sleep(100 * time.Millisecond)
}
