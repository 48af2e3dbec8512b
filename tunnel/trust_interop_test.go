package tunnel_test

import (
	"context"
	"encoding/json"
	"fmt"
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

// TestPreSigningServerRefusesSignedClearly: a server of the release before
// signed envelopes (commit 081332d) refuses a signed request as a version
// it does not speak. Its answer and dead letter were captured by running
// that release's server on a request this runtime signed
// (internal/wire/testdata/capture_pre_signing_refuses_signed_test.go.txt);
// a signed client of this runtime reports that answer as
// FAILED_PRECONDITION naming both versions and the fix.
func TestPreSigningServerRefusesSignedClearly(t *testing.T) {
	raw, err := os.ReadFile("../internal/wire/testdata/pre-signing-refuses-signed.json")
	if err != nil {
		t.Fatal(err)
	}
	var captured struct {
		Request    string `json:"signed_request_hex"`
		Answer     string `json:"answer_hex"`
		DeadLetter string `json:"dead_letter_json"`
	}
	if err := json.Unmarshal(raw, &captured); err != nil {
		t.Fatal(err)
	}
	secret := []byte(strings.Repeat("a", 32))
	key, _ := wire.NewCallerKey(secret)
	signed, err := wire.DecodeRequest(mustHex(t, captured.Request))
	if err != nil || signed.Version != wire.SignedVersion || !key.VerifyRequest(signed) {
		t.Fatalf("the captured request reads as %+v, %v", signed, err)
	}
	old, err := wire.DecodeResponse(mustHex(t, captured.Answer))
	if err != nil {
		t.Fatal(err)
	}
	const refusal = "envelope version 3 is not supported (this rpr speaks versions 1 to 2): run the same rpr release on both sides"
	var letter map[string]string
	if err := json.Unmarshal([]byte(captured.DeadLetter), &letter); err != nil {
		t.Fatal(err)
	}
	if tunnel.Code(old.Code) != tunnel.FailedPrecondition || !strings.Contains(old.Message, refusal) || letter["reason"] != refusal {
		t.Fatalf("the earlier server answered %v %q and dead-lettered it with %q", tunnel.Code(old.Code), old.Message, letter["reason"])
	}

	// A signed caller of this runtime, and that server's answer to it.
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	const service = "examples.greeter.v1.Greeter"
	beatAs(t, rdb, service, "pre-signing-server")
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler),
		Credentials: &tunnel.Credentials{Caller: "alice", Secret: secret}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	method := &tunnel.MethodDesc{Service: &tunnel.ServiceInfo{Name: service}, Name: "SayHello"}
	done := make(chan error, 1)
	go func() {
		done <- client.Invoke(ctx, method, wrapperspb.String("Ada"), new(wrapperspb.StringValue), tunnel.WithTimeout(time.Minute))
	}()
	var sent []redis.XMessage
	waitFor(t, "the signed request in the request stream", func() bool {
		sent, err = rdb.XRange(ctx, "rpr:v1:{"+service+"}:req", "-", "+").Result()
		return err == nil && len(sent) == 1
	})
	answerAs(t, rdb, sent[0], old)
	if err := <-done; tunnel.CodeOf(err) != tunnel.FailedPrecondition || !strings.Contains(err.Error(), refusal) || !strings.Contains(err.Error(), "unsigned answer") {
		t.Fatalf("Invoke = %v, want FAILED_PRECONDITION saying %q, marked as an unsigned answer", err, refusal)
	}
}

// beatAs makes worker, a server of an earlier release that the test
// stands in for, live for service: a worker record of that release's
// shape, beating now.
func beatAs(t *testing.T, rdb redis.UniversalClient, service, worker string) {
	t.Helper()
	ctx := context.Background()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, "rpr:v1:{"+service+"}:workers", worker,
		fmt.Sprintf(`{"host":"h","pid":1,"started_ms":1,"beat_ms":%d}`, now.UnixMilli())).Err(); err != nil {
		t.Fatal(err)
	}
}

// answerAs answers the request in entry as the server that gave old, a
// captured answer, would: old for the request's id, on its reply stream.
func answerAs(t *testing.T, rdb redis.UniversalClient, entry redis.XMessage, old *wire.Response) {
	t.Helper()
	req, err := wire.DecodeRequest([]byte(entry.Values[wire.Field].(string)))
	if err != nil {
		t.Fatal(err)
	}
	answer := *old
	answer.Message = strings.ReplaceAll(answer.Message, old.ID, req.ID)
	answer.ID = req.ID
	raw, err := wire.EncodeResponse(&answer)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: req.ReplyTo, Values: []any{wire.Field, raw}}).Err(); err != nil {
		t.Fatal(err)
	}
}
