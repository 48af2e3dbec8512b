package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func testKey(tb testing.TB, fill byte) *CallerKey {
	tb.Helper()
	k, err := NewCallerKey(bytes.Repeat([]byte{fill}, MinCallerSecret))
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

func signedTestRequest() *Request {
	return &Request{Version: Version, ID: "20261201-TEST-1795995318695-AAAAAAAAAA", Method: "test.v1.Echo/Echo",
		Deadline: 1795995328695, ReplyTo: "rpr:v1:{test.v1.Echo}:resp:c1", Enqueued: 1795995318695, Attempt: 1,
		Kind: KindUnary, Payload: []byte("secret payload"),
		Header: Metadata{"authorization": {"Bearer hunter2"}, "tenant": {"acme"}, "x-b": nil}}
}

// roundTrip encodes and decodes env as it crosses Redis.
func roundTrip(t *testing.T, env *Request) (*Request, []byte) {
	t.Helper()
	raw, err := EncodeRequest(env)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRequest(raw)
	if err != nil {
		t.Fatalf("decode a signed request: %v", err)
	}
	return got, raw
}

func TestSignedRequestVerifiesAcrossRetriesAndNotWhenAltered(t *testing.T) {
	alice, mallory := testKey(t, 1), testKey(t, 2)
	env := signedTestRequest()
	alice.SignRequest(env, "alice")
	got, _ := roundTrip(t, env)
	if got.Version != SignedVersion || got.Caller != "alice" || !alice.VerifyRequest(got) {
		t.Fatalf("a signed request does not verify after the trip: version %d caller %q", got.Version, got.Caller)
	}
	if mallory.VerifyRequest(got) {
		t.Error("another caller's key verifies alice's request")
	}
	// What servers change as a request moves keeps the signature.
	got.Attempt, got.Replays = 3, 1
	if again, _ := roundTrip(t, got); !alice.VerifyRequest(again) {
		t.Error("a retried (attempt 3, replayed once) request no longer verifies")
	}
	for name, alter := range map[string]func(*Request){
		"method":   func(r *Request) { r.Method = "test.v1.Echo/Admin" },
		"payload":  func(r *Request) { r.Payload = []byte("forged") },
		"header":   func(r *Request) { r.Header["tenant"] = []string{"evil"} },
		"deadline": func(r *Request) { r.Deadline++ },
		"reply-to": func(r *Request) { r.ReplyTo = "rpr:v1:{test.v1.Echo}:resp:mallory" },
		"caller":   func(r *Request) { r.Caller = "bob" },
		"key":      func(r *Request) { r.Key = "order-1" },
	} {
		forged, _ := roundTrip(t, env)
		alter(forged)
		if alice.VerifyRequest(forged) {
			t.Errorf("a request with its %s changed still verifies", name)
		}
	}
}

func TestSealedRequestHidesHeaderAndPayload(t *testing.T) {
	alice := testKey(t, 1)
	env := signedTestRequest()
	if err := alice.SealRequest(env); err != nil {
		t.Fatal(err)
	}
	alice.SignRequest(env, "alice")
	got, raw := roundTrip(t, env)
	for _, secret := range []string{"secret payload", "hunter2", "acme", "authorization"} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("the sealed envelope shows %q in the clear", secret)
		}
	}
	if !alice.VerifyRequest(got) {
		t.Fatal("a sealed request does not verify")
	}
	if err := testKey(t, 2).OpenRequest(got); err == nil {
		t.Error("another caller's key opens alice's sealed request")
	}
	if err := alice.OpenRequest(got); err != nil {
		t.Fatal(err)
	}
	if string(got.Payload) != "secret payload" || got.Header["authorization"][0] != "Bearer hunter2" || got.Header["x-b"] != nil {
		t.Errorf("opened payload %q header %v", got.Payload, got.Header)
	}
	// Written again (a retry), it is still sealed and still verifies.
	again, raw := roundTrip(t, got)
	if bytes.Contains(raw, []byte("secret payload")) || !alice.VerifyRequest(again) {
		t.Error("a retried sealed request leaks its payload or stops verifying")
	}
}

func TestSignedAndSealedResponse(t *testing.T) {
	alice := testKey(t, 1)
	resp := &Response{Version: Version, ID: "r1", Code: 5, Message: "order 7 not found", Details: [][]byte{[]byte("d")},
		Header: Metadata{"h": {"1"}}, Trailer: Metadata{"t": {"2"}}, Payload: []byte("p")}
	if err := alice.SealResponse(resp); err != nil {
		t.Fatal(err)
	}
	alice.SignResponse(resp)
	raw, err := EncodeResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("order 7")) {
		t.Error("a sealed response shows its message")
	}
	got, err := DecodeResponse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !alice.VerifyResponse(got) || testKey(t, 2).VerifyResponse(got) {
		t.Fatal("response signature: alice's key must verify it, and only alice's")
	}
	if err := alice.OpenResponse(got); err != nil {
		t.Fatal(err)
	}
	if got.Message != "order 7 not found" || string(got.Payload) != "p" || got.Header["h"][0] != "1" || got.Trailer["t"][0] != "2" || len(got.Details) != 1 {
		t.Errorf("opened response = %+v", got)
	}
	forged := &Response{Version: Version, ID: "r1", Code: 0, Payload: []byte("forged")}
	alice.SignResponse(forged)
	forged.Payload = []byte("forged twice")
	if alice.VerifyResponse(forged) {
		t.Error("an altered signed response verifies")
	}
}

func TestSignedFieldsNeedTheSignedVersion(t *testing.T) {
	env := signedTestRequest()
	env.Caller = "alice" // but version 1 and no signature
	raw, _ := EncodeRequest(env)
	if _, err := DecodeRequest(raw); err == nil || !strings.Contains(err.Error(), "version 1 envelope") {
		t.Errorf("a caller in a v1 envelope: err = %v", err)
	}
	env = signedTestRequest()
	env.Version = SignedVersion
	raw, _ = EncodeRequest(env)
	if _, err := DecodeRequest(raw); err == nil || !strings.Contains(err.Error(), "without a signature") {
		t.Errorf("an unsigned v3 envelope: err = %v", err)
	}
	env = signedTestRequest()
	testKey(t, 1).SignRequest(env, "bad name/with slash")
	raw, _ = EncodeRequest(env)
	if _, err := DecodeRequest(raw); err == nil || !strings.Contains(err.Error(), "caller name") {
		t.Errorf("a bad caller name: err = %v", err)
	}
	// A peer that speaks only versions 1 and 2 refuses a signed envelope
	// with a VersionError, which it answers FAILED_PRECONDITION.
	env = signedTestRequest()
	testKey(t, 1).SignRequest(env, "alice")
	raw, _ = EncodeRequest(env)
	if got := peekVersion(raw); got != SignedVersion {
		t.Errorf("a signed envelope's version = %d, want %d", got, SignedVersion)
	}
	// And a version after this one is refused the same way by this peer.
	if raw[1] != 0xa1 || raw[2] != 'v' || raw[3] != SignedVersion {
		t.Fatalf("the envelope does not start with v = %d: % x", SignedVersion, raw[:4])
	}
	raw[3] = SignedVersion + 1 // v is the map's first key: 0x8N 0xa1 'v' <fixint>
	var verr VersionError
	if _, err := DecodeRequest(raw); !errors.As(err, &verr) || verr.Got != SignedVersion+1 ||
		!strings.Contains(err.Error(), "speaks versions 1 to 3): run the same rpr release") {
		t.Errorf("a version-4 envelope: err = %v, want a VersionError naming both versions and the fix", err)
	}
}

func TestCancelMessages(t *testing.T) {
	alice := testKey(t, 1)
	msg := alice.CancelMessage("test.v1.Echo", "r1", "alice")
	id, caller, sig := ParseCancel(msg)
	if id != "r1" || caller != "alice" || !alice.VerifyCancel("test.v1.Echo", id, sig) {
		t.Fatalf("ParseCancel(%q) = %q %q %q; must verify", msg, id, caller, sig)
	}
	if alice.VerifyCancel("test.v1.Echo", "r2", sig) || alice.VerifyCancel("test.v1.Other", "r1", sig) || testKey(t, 2).VerifyCancel("test.v1.Echo", "r1", sig) {
		t.Error("a cancel signature verifies for another request, service or key")
	}
	if id, caller, sig := ParseCancel("r1"); id != "r1" || caller != "" || sig != "" {
		t.Errorf("ParseCancel of a bare id = %q %q %q", id, caller, sig)
	}
}

func TestStateNameIsScopedByCaller(t *testing.T) {
	env := &Request{ID: "r1", Key: "order-1001"}
	if env.StateName() != "order-1001" {
		t.Errorf("unsigned: %q", env.StateName())
	}
	env.Caller = "alice"
	if env.StateName() != "alice/order-1001" {
		t.Errorf("signed: %q", env.StateName())
	}
	env.Key = env.ID
	if env.StateName() != "r1" {
		t.Errorf("signed, default key: %q", env.StateName())
	}
}

func TestCallerKeyNeedsALongSecret(t *testing.T) {
	if _, err := NewCallerKey([]byte("short")); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("short secret: err = %v", err)
	}
}

// BenchmarkCallerKey measures the Go CPU that authenticating one unary
// call adds, both sides together: the client signs (and seals) the
// request, the server verifies (and opens) it and signs (and seals) the
// answer, the client verifies (and opens) that; 32-byte payloads.
//
//	go test -run '^$' -bench CallerKey ./internal/wire
func BenchmarkCallerKey(b *testing.B) {
	key, _ := NewCallerKey(bytes.Repeat([]byte{1}, MinCallerSecret))
	payload := bytes.Repeat([]byte{'p'}, 32)
	for _, seal := range []bool{false, true} {
		name := "signed"
		if seal {
			name = "sealed"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := &Request{Version: Version, ID: "20261201-TEST-1795995318695-AAAAAAAAAA", Method: "test.v1.Echo/Echo",
					Deadline: 1795995328695, ReplyTo: "rpr:v1:{test.v1.Echo}:resp:c1", Enqueued: 1795995318695, Attempt: 1,
					Kind: KindUnary, Payload: payload, Header: Metadata{"traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}
				if seal && key.SealRequest(req) != nil {
					b.Fatal("seal")
				}
				key.SignRequest(req, "bench")
				if !key.VerifyRequest(req) || (seal && key.OpenRequest(req) != nil) {
					b.Fatal("verify")
				}
				resp := &Response{Version: Version, ID: req.ID, Payload: payload}
				if seal && key.SealResponse(resp) != nil {
					b.Fatal("seal")
				}
				key.SignResponse(resp)
				if !key.VerifyResponse(resp) || (seal && key.OpenResponse(resp) != nil) {
					b.Fatal("verify")
				}
			}
		})
	}
}
