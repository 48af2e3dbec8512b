package tunnel_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestV1ServerRefusesStreamsClearly: a server of the v1 runtime, which has
// no streams, answers a stream open (wire version 2) with a clear refusal;
// internal/wire/testdata holds its answer, captured. A caller of this
// runtime that gets that answer ends the stream with it: FAILED_PRECONDITION
// saying to run the same release on both sides.
func TestV1ServerRefusesStreamsClearly(t *testing.T) {
	raw, err := os.ReadFile("../internal/wire/testdata/v1-refuses-streams.json")
	if err != nil {
		t.Fatal(err)
	}
	var captured struct {
		Open   string `json:"stream_open_hex"`
		Answer string `json:"v1_answer_hex"`
		Reason string `json:"v1_dead_letter_reason"`
	}
	if err := json.Unmarshal(raw, &captured); err != nil {
		t.Fatal(err)
	}
	// The open the v1 server refused is one this runtime wrote.
	open, err := wire.DecodeRequest(mustHex(t, captured.Open))
	if err != nil || open.Kind != wire.KindStream || open.Version != wire.StreamVersion {
		t.Fatalf("the captured open reads as %+v, %v", open, err)
	}
	v1Answer, err := wire.DecodeResponse(mustHex(t, captured.Answer))
	if err != nil {
		t.Fatal(err)
	}
	const refusal = "envelope version 2 is not supported (this rpr speaks version 1): run the same rpr release on both sides"
	if tunnel.Code(v1Answer.Code) != tunnel.FailedPrecondition || !strings.Contains(v1Answer.Message, refusal) || captured.Reason != refusal {
		t.Fatalf("the v1 server answered %v %q and dead-lettered it with %q", tunnel.Code(v1Answer.Code), v1Answer.Message, captured.Reason)
	}

	// A caller of this runtime, and the v1 server's answer to its open.
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	const service = "examples.greeter.v1.Greeter"
	beatAs(t, rdb, service, "v1-server")
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	method := &tunnel.MethodDesc{Service: &tunnel.ServiceInfo{Name: service}, Name: "SayHello", ServerStreams: true}
	s, err := client.NewStream(ctx, method, tunnel.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(wrapperspb.String("ada")); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var sent []redis.XMessage
	waitFor(t, "the stream's open in the request stream", func() bool {
		sent, err = rdb.XRange(ctx, "rpr:v1:{"+service+"}:req", "-", "+").Result()
		return err == nil && len(sent) == 1
	})
	// What the v1 server writes for this open: its captured answer, for
	// this call's id.
	answerAs(t, rdb, sent[0], v1Answer)
	err = s.RecvMsg(new(wrapperspb.StringValue))
	if tunnel.CodeOf(err) != tunnel.FailedPrecondition || !strings.Contains(err.Error(), refusal) {
		t.Fatalf("RecvMsg = %v, want FAILED_PRECONDITION saying %q", err, refusal)
	}
}
