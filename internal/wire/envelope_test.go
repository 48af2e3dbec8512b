package wire

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

func validRequest() *Request {
	return &Request{
		Version: Version, ID: "20261129-TEST-1795995318695-AAAAAAAAAA", Method: "s.S/M",
		Deadline: 1795995319695, ReplyTo: "rpr:v1:{s.S}:resp:c", Enqueued: 1795995318695,
		Attempt: 1, Kind: KindUnary, Payload: []byte{1, 2}, Header: Metadata{"k": {"v"}},
	}
}

func TestRequestEnvelopeRoundTrip(t *testing.T) {
	in := validRequest()
	b, err := marshalEnvelope(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.ID != in.ID || out.Deadline != in.Deadline || out.Header["k"][0] != "v" || string(out.Payload) != string(in.Payload) {
		t.Fatalf("round trip: %+v", out)
	}
}

func TestRequestEnvelopeStrictDecoding(t *testing.T) {
	encode := func(mutate func(map[string]any)) []byte {
		var m map[string]any
		b, _ := marshalEnvelope(validRequest())
		_ = msgpack.Unmarshal(b, &m)
		mutate(m)
		out, _ := msgpack.Marshal(m)
		return out
	}
	good, _ := marshalEnvelope(validRequest())
	for name, tc := range map[string]struct {
		raw  []byte
		want string
	}{
		"garbage":        {[]byte("\xc1\xc1 nope"), "malformed envelope"},
		"unknown field":  {encode(func(m map[string]any) { m["zz"] = 1 }), "malformed envelope"},
		"newer version":  {encode(func(m map[string]any) { m["v"] = 7; m["zz"] = 1 }), "version 7 is not supported"},
		"no version":     {encode(func(m map[string]any) { delete(m, "v") }), "no version"},
		"no id":          {encode(func(m map[string]any) { delete(m, "id") }), "no request id"},
		"no reply-to":    {encode(func(m map[string]any) { delete(m, "r") }), "no reply-to"},
		"no deadline":    {encode(func(m map[string]any) { delete(m, "dl") }), "no deadline"},
		"trailing bytes": {append(good, 0x01), "trailing bytes"},
	} {
		_, err := DecodeRequest(tc.raw)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, tc.want)
		}
	}
	_, err := DecodeRequest(encode(func(m map[string]any) { m["v"] = SignedVersion + 1 }))
	var verr VersionError
	if !errors.As(err, &verr) || verr.Got != SignedVersion+1 {
		t.Errorf("version %d: err = %v, want VersionError{%d}", SignedVersion+1, err, SignedVersion+1)
	}
}

// A response decoded from a lent buffer shares only its payload with it:
// what a caller keeps (id, message, metadata, details) survives the
// buffer's reuse.
func TestResponseLentSharesOnlyThePayload(t *testing.T) {
	in := &Response{
		Version: Version, ID: "20261129-TEST-1795995318695-AAAAAAAAAA", Code: 0,
		Message: "message", Details: [][]byte{{7}}, Header: Metadata{"h": {"hv"}},
		Trailer: Metadata{"t": {"tv"}}, Payload: []byte("payload"),
	}
	b, err := EncodeResponse(in)
	if err != nil {
		t.Fatal(err)
	}
	lent := b // a buffer the test reuses once decoded
	var got Response
	if err := DecodeResponseLentInto(unsafe.String(unsafe.SliceData(lent), len(lent)), &got); err != nil {
		t.Fatal(err)
	}
	for i := range lent {
		lent[i] = 'X'
	}
	if got.ID != in.ID || got.Message != in.Message || got.Header["h"][0] != "hv" || got.Trailer["t"][0] != "tv" || got.Details[0][0] != 7 {
		t.Fatalf("after the buffer's reuse: %+v; want the strings and details as sent", got)
	}
	if string(got.Payload) != strings.Repeat("X", len(in.Payload)) {
		t.Fatalf("payload %q after the buffer's reuse; want it to share the buffer", got.Payload)
	}
}
