package tunnel_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// BenchmarkTrust measures what authenticated callers cost, in one process
// so the modes compare as ratios: unary echo calls with a 32-byte payload,
// unsigned (the baseline), signed (Credentials; the server verifies and
// signs the answer), and signed and sealed, each for a method that is not
// idempotent (a signed call of which takes the state hash's path, so that
// a copy cannot run again) and for an idempotent one (the fast path).
// Each reports what runConcurrent reports and logs the sizes of one
// request and one answer envelope in Redis (-v).
//
//	go test -run '^$' -bench Trust -benchtime 10000x -v ./tunnel
func BenchmarkTrust(b *testing.B) {
	secret := []byte(strings.Repeat("k", 32))
	payload := strings.Repeat("p", 30) // 32 bytes as a StringValue
	for _, mode := range []struct {
		name  string
		creds *tunnel.Credentials
	}{
		{"unsigned", nil},
		{"signed", &tunnel.Credentials{Caller: "bench", Secret: secret}},
		{"sealed", &tunnel.Credentials{Caller: "bench", Secret: secret, Seal: true}},
	} {
		for _, name := range []string{"Echo", "Idem"} {
			b.Run(mode.name+"/"+name, func(b *testing.B) {
				rs := redistest.Start(b)
				rdb := rs.Client(b)
				sent := &redisinfo.Sent{}
				rdb.AddHook(sent)
				quiet := slog.New(slog.DiscardHandler)
				opts := tunnel.ServerOptions{Concurrency: 256, Logger: quiet}
				if mode.creds != nil {
					opts.Trust = &tunnel.Trust{Callers: map[string][]byte{"bench": secret}}
				}
				startServer(b, rdb, opts, func(s *tunnel.Server) {
					echo := func(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) { return in, nil }
					s.RegisterService(&echoDesc, map[string]echoHandler{"Echo": echo, "Idem": echo})
				})
				client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: quiet, Credentials: mode.creds})
				if err != nil {
					b.Fatal(err)
				}
				defer client.Close()
				m := method(name)
				waitAnswered(b, client, m)
				req, resp := envelopeSizes(b, mode.creds, payload)
				in := wrapperspb.String(payload)
				runConcurrent(b, func() error {
					return client.Invoke(context.Background(), m, in, new(wrapperspb.StringValue))
				}, func() redisinfo.Sample { return redisSample(b, rdb) }, sent)
				b.Logf("%s: a request envelope is %d bytes, its answer %d", mode.name, req, resp)
			})
		}
	}
}

// envelopeSizes returns the sizes of a request and an answer envelope of
// an echo of payload, as a client with creds and its server write them.
func envelopeSizes(b *testing.B, creds *tunnel.Credentials, payload string) (req, resp int) {
	body := mustMarshal(wrapperspb.String(payload))
	r := &wire.Request{Version: wire.Version, ID: "20261201-ECHO-1796136040620-KSAR8GFBNV", Method: echoService + "/Echo",
		Deadline: 1796136070620, ReplyTo: "rpr:v1:{" + echoService + "}:resp:host-1234-abcdef", Enqueued: 1796136040620,
		Attempt: 1, Kind: wire.KindUnary, Payload: body}
	a := &wire.Response{Version: wire.Version, ID: r.ID, Payload: body}
	if creds != nil {
		key, err := wire.NewCallerKey(creds.Secret)
		if err != nil {
			b.Fatal(err)
		}
		if creds.Seal {
			if err := key.SealRequest(r); err != nil {
				b.Fatal(err)
			}
			if err := key.SealResponse(a); err != nil {
				b.Fatal(err)
			}
		}
		key.SignRequest(r, creds.Caller)
		key.SignResponse(a)
	}
	rb, err := wire.EncodeRequest(r)
	if err != nil {
		b.Fatal(err)
	}
	ab, err := wire.EncodeResponse(a)
	if err != nil {
		b.Fatal(err)
	}
	return len(rb), len(ab)
}
