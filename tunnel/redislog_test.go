package tunnel_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/logcapture"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestRedisLoggerDuringOutage kills Redis under a serving Server with
// tunnel.RedisLogger installed: go-redis's complaints arrive in the given
// slog logger as structured records.
func TestRedisLoggerDuringOutage(t *testing.T) {
	// go-redis keeps one logger per process: the other tests of this
	// binary log through this one too once it is installed, which is
	// harmless (their lines are Redis's, not theirs to assert).
	logs := &logcapture.Buffer{}
	redis.SetLogger(tunnel.NewRedisLogger(slog.New(slog.NewTextHandler(logs, nil))))
	rs := redistest.Start(t)
	ctx := context.Background()
	execs := &executions{n: map[string]int{}}
	desc := failoverDesc(1)
	startServer(t, mustOpen(t, ctx, rs.URL()), tunnel.ServerOptions{Logger: slog.New(slog.DiscardHandler)},
		func(s *tunnel.Server) { s.RegisterService(desc, execs) })
	client, err := tunnel.NewClient(mustOpen(t, ctx, rs.URL()), tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	m := &desc.Methods[0]
	waitFor(t, "the server answers", func() bool {
		return client.Invoke(ctx, m, wrapperspb.String("before"), new(wrapperspb.StringValue)) == nil
	})

	rs.Kill()
	waitFor(t, "go-redis to report the outage through the logger", func() bool {
		return len(logs.Lines(rs.Addr())) > 0
	})
	rs.Restart(t) // recovery itself is the fault tests' (internal/faulttest)
	for _, line := range logs.Lines(rs.Addr()) {
		if !strings.Contains(line, "source=go-redis") || !strings.Contains(line, `msg="redis: `) || !strings.Contains(line, "level=WARN") {
			t.Errorf("go-redis record %q: want a structured WARN with source=go-redis", line)
		}
	}
}
