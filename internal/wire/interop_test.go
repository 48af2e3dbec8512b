package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
)

// v1Captured is what the v1 runtime (before the protocol moved into this
// package) wrote to Redis in one run: a unary request and its answer, a
// failed one, and two async requests (one with an idempotency key), as
// raw envelope bytes, and the keys the run left. testdata/capture_v1_test.go.txt
// is the program that recorded them at that commit.
type v1Captured struct {
	Commit          string   `json:"commit"`
	ClientID        string   `json:"client_id"`
	UnaryRequest    string   `json:"unary_request_hex"`
	FailedRequest   string   `json:"failed_request_hex"`
	UnaryResponse   string   `json:"unary_response_hex"`
	FailedResponse  string   `json:"failed_response_hex"`
	AsyncRequest    string   `json:"async_request_hex"`
	AsyncKeyRequest string   `json:"async_key_request_hex"`
	Keys            []string `json:"keys"`
}

func loadV1Captured(t testing.TB) v1Captured {
	t.Helper()
	raw, err := os.ReadFile("testdata/v1-captured.json")
	if err != nil {
		t.Fatal(err)
	}
	var c v1Captured
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestV1EnvelopesDecodeAndEncodeIdentically decodes every envelope the v1
// runtime wrote and encodes it again: the bytes must be the same, so a v1
// peer and this one read each other's envelopes exactly.
func TestV1EnvelopesDecodeAndEncodeIdentically(t *testing.T) {
	c := loadV1Captured(t)
	for name, s := range map[string]string{"unary": c.UnaryRequest, "failed": c.FailedRequest, "async": c.AsyncRequest, "async with key": c.AsyncKeyRequest} {
		in := unhex(t, s)
		env, err := DecodeRequest(in)
		if err != nil {
			t.Fatalf("%s request: %v", name, err)
		}
		if env.Kind == KindAsync && env.Key == env.ID {
			env.Key = "" // the decoder fills in the default key; it is not on the wire
		}
		out, err := EncodeRequest(env)
		if err != nil || !bytes.Equal(out, in) {
			t.Errorf("%s request: encoded again to\n%x\nwant\n%x (%v)", name, out, in, err)
		}
	}
	for name, s := range map[string]string{"unary": c.UnaryResponse, "failed": c.FailedResponse} {
		in := unhex(t, s)
		env, err := DecodeResponse(in)
		if err != nil {
			t.Fatalf("%s response: %v", name, err)
		}
		out, err := EncodeResponse(env)
		if err != nil || !bytes.Equal(out, in) {
			t.Errorf("%s response: encoded again to\n%x\nwant\n%x (%v)", name, out, in, err)
		}
	}
	unary, _ := DecodeRequest(unhex(t, c.UnaryRequest))
	if unary.Method != "examples.greeter.v1.Greeter/SayHello" || unary.Kind != KindUnary || unary.Attempt != 1 ||
		unary.ReplyTo != "rpr:v1:{examples.greeter.v1.Greeter}:resp:"+c.ClientID || unary.Header["tenant"][0] != "acme" {
		t.Errorf("the v1 unary request reads as %+v", unary)
	}
	keyed, _ := DecodeRequest(unhex(t, c.AsyncKeyRequest))
	if keyed.Kind != KindAsync || keyed.Key != "order-2" || keyed.ReplyTo != "" {
		t.Errorf("the v1 async request reads as %+v", keyed)
	}
}
