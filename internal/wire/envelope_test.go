package wire

import (
	"errors"
	"strings"
	"testing"

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
