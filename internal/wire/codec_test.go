package wire

import (
	"bytes"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// Status codes the samples carry, by their gRPC numbers.
const (
	codeResourceExhausted  = 8
	codeFailedPrecondition = 9
	codeInternal           = 13
	codeUnavailable        = 14
)

// The reflection codec the hand-written one replaced is the reference: the
// struct tags still describe the wire format, so msgpack.Marshal and a
// strict msgpack.Decoder are what envelopes already in Redis were written
// with and what older readers decode with.

// referenceEncode is the reflection encoder marshalEnvelope used to be.
func referenceEncode(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// referenceDecode is the decoding half of the reflection decodeStrict: a
// strict decoder that refuses unknown fields and trailing bytes.
func referenceDecode(b []byte, v any) error {
	r := bytes.NewReader(b)
	dec := msgpack.NewDecoder(r)
	dec.DisallowUnknownFields(true)
	err := dec.Decode(v)
	if err == nil && r.Len() > 0 {
		err = fmt.Errorf("%d trailing bytes after the envelope", r.Len())
	}
	return err
}

// referenceDecodeStrict is decodeStrict over the reflection decoder, for
// the benchmark's baseline.
func referenceDecodeStrict(b []byte, v any, version func() int) error {
	return decodeStrict(b, func(b []byte) error { return referenceDecode(b, v) }, version)
}

// big is a value past 64 KiB, so that str32 and bin32 are written and read.
var big = strings.Repeat("0123456789abcdef", 70<<10/16)

// sampleRequests covers every field and each form a value can take on the
// wire: absent, nil, empty, small, and large.
func sampleRequests() map[string]*Request {
	unary := validRequest()
	return map[string]*Request{
		"unary": unary,
		"async with everything": {
			Version: Version, ID: "20261129-TEST-1795995318695-AAAAAAAAAB", Method: "s.S/M",
			Header:   Metadata{"multi": {"a", "b", "c"}, "nil": nil, "empty": {}, "one": {"x"}},
			Enqueued: 1795995318695, Attempt: 3, Kind: KindAsync, Payload: []byte("payload"),
			Key: "order-42", Timeout: 30000, Replays: 2,
			Retry: &RetryPolicy{MaxAttempts: 5, InitialBackoff: 100, MaxBackoff: 60000, Multiplier: 1.5,
				RetryableCodes: []uint32{codeUnavailable, codeResourceExhausted, math.MaxUint32}},
		},
		"empty retry policy": {Version: Version, ID: "id", Method: "s.S/M", Attempt: 1, Kind: KindAsync,
			Retry: &RetryPolicy{}},
		"retry policy with empty codes": {Version: Version, ID: "id", Method: "s.S/M", Attempt: 1, Kind: KindAsync,
			Retry: &RetryPolicy{MaxAttempts: 2, RetryableCodes: []uint32{}}},
		"nil header and payload":   {Version: Version, ID: "id", Method: "s.S/M", Attempt: 1, Kind: KindUnary},
		"empty header and payload": {Version: Version, ID: "id", Method: "s.S/M", Attempt: 1, Kind: KindUnary, Header: Metadata{}, Payload: []byte{}},
		"large": {
			Version: Version, ID: big[:40], Method: big[:300], Deadline: math.MaxInt64, ReplyTo: big[:70000],
			Header:   Metadata{"big": {big, big[:31], big[:32], big[:255], big[:256], big[:65535], big[:65536]}},
			Enqueued: math.MinInt64, Attempt: math.MaxInt32 + 1, Kind: math.MaxUint8, Payload: []byte(big),
			Key: big[:33], Timeout: -1, Replays: -200,
			Retry: &RetryPolicy{MaxAttempts: -1, InitialBackoff: math.MinInt64, MaxBackoff: math.MaxInt64,
				Multiplier: math.Inf(1)},
		},
		"stream open": {
			Version: StreamVersion, ID: "20261129-TEST-1795995318695-AAAAAAAAAC", Method: "s.S/Watch",
			Deadline: 1795995319695, ReplyTo: "rpr:v1:{s.S}:resp:c", Enqueued: 1795995318695, Attempt: 1,
			Kind: KindStream, Payload: []byte{1}, Streams: StreamsClient | StreamsServer,
			Window: 64, WindowBytes: 1 << 20, StreamDeadline: 1795999999999, Messages: 1, Closed: true,
		},
		"large stream open": {
			Version: StreamVersion, ID: "id", Method: "s.S/M", Kind: KindStream, Streams: math.MaxUint8,
			Window: math.MinInt32, WindowBytes: math.MaxInt64, StreamDeadline: math.MinInt64, Messages: math.MaxInt32 + 1,
		},
		"zero": {},
	}
}

// sampleResponses is sampleRequests for responses.
func sampleResponses() map[string]*Response {
	return map[string]*Response{
		"ok":          {Version: Version, ID: "20261129-TEST-1795995318695-AAAAAAAAAA", Payload: []byte{1, 2, 3}},
		"ok no reply": {Version: Version, ID: "id"},
		"refused":     {Version: StreamVersion, ID: "id", Code: codeResourceExhausted, Message: "too many streams", Refused: true},
		"error with everything": {
			Version: Version, ID: "id", Code: codeFailedPrecondition, Message: "the order is closed",
			Details: [][]byte{[]byte("detail one"), nil, {}, []byte(big)},
			Header:  Metadata{"h": {"1", "2"}, "nil": nil}, Trailer: Metadata{"t": {}, "u": {"v"}},
			Payload: []byte{0},
		},
		"empty collections": {Version: Version, ID: "id", Code: codeInternal,
			Details: [][]byte{}, Header: Metadata{}, Trailer: Metadata{}, Payload: []byte{}},
		"large": {Version: Version, ID: big[:70000], Code: math.MaxUint32, Message: big,
			Trailer: Metadata{big[:300]: {big}}, Payload: []byte(big)},
		"zero": {},
	}
}

// decodeRequestInPlace decodes the way servers and clients do: from a
// string, read in place (see DecodeRequestString).
func decodeRequestInPlace(b []byte, env *Request) error {
	return decodeRequestFields(stringBytes(string(b)), shareAll, env)
}

// decodeResponseInPlace is decodeRequestInPlace for responses.
func decodeResponseInPlace(b []byte, env *Response) error {
	return decodeResponseFields(stringBytes(string(b)), shareAll, env)
}

// TestEnvelopeCodecCompatibility checks that the codec and the reflection
// codec understand each other both ways: old envelopes (already queued or
// dead-lettered) decode with the new decoder exactly as with the old one,
// and old decoders read what the new encoder writes.
func TestEnvelopeCodecCompatibility(t *testing.T) {
	for name, in := range sampleRequests() {
		t.Run("request/"+name, func(t *testing.T) {
			checkCompatibility(t, in, EncodeRequest, decodeRequestInPlace)
		})
	}
	for name, in := range sampleResponses() {
		t.Run("response/"+name, func(t *testing.T) {
			checkCompatibility(t, in, EncodeResponse, decodeResponseInPlace)
		})
	}
}

// checkCompatibility encodes in with each encoder and decodes each result
// with each decoder; all four must agree with the reflection round trip.
func checkCompatibility[T any](t *testing.T, in *T, encode func(*T) ([]byte, error), decode func([]byte, *T) error) {
	t.Helper()
	oldBytes := referenceEncode(t, in)
	newBytes, err := encode(in)
	if err != nil {
		t.Fatal(err)
	}
	want := new(T)
	if err := referenceDecode(oldBytes, want); err != nil {
		t.Fatalf("reflection round trip: %v", err)
	}
	for _, c := range []struct {
		name   string
		b      []byte
		decode func([]byte, *T) error
	}{
		{"old encoder, new decoder", oldBytes, decode},
		{"new encoder, old decoder", newBytes, func(b []byte, v *T) error { return referenceDecode(b, v) }},
		{"new encoder, new decoder", newBytes, decode},
	} {
		got := new(T)
		if err := c.decode(c.b, got); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, abbreviate(got), abbreviate(want))
		}
	}
}

// abbreviate prints v with long runs cut, for failure messages.
func abbreviate(v any) string {
	s := fmt.Sprintf("%+v", v)
	if len(s) > 600 {
		s = s[:600] + "…"
	}
	return s
}

// TestEnvelopeCodecWritesReflectionBytes checks that the encoder writes
// byte for byte what msgpack.Marshal writes, for every combination of the
// omitempty fields (so the map lengths are right) and every sample whose
// maps have at most one key (Go randomizes the order of more).
func TestEnvelopeCodecWritesReflectionBytes(t *testing.T) {
	same := func(t *testing.T, what string, v any) {
		t.Helper()
		got, err := marshalEnvelope(v)
		if err != nil {
			t.Fatal(err)
		}
		if want := referenceEncode(t, v); !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %x\nwant %x", what, got, want)
		}
	}
	for name, in := range sampleRequests() {
		if len(in.Header) <= 1 {
			same(t, "request "+name, in)
		}
	}
	for name, in := range sampleResponses() {
		if len(in.Header) <= 1 && len(in.Trailer) <= 1 {
			same(t, "response "+name, in)
		}
	}
	for mask := range 1 << 7 {
		on := func(bit int) bool { return mask&(1<<bit) != 0 }
		env := &Request{Version: Version, ID: "id", Method: "s.S/M", Enqueued: 7, Attempt: 1, Kind: KindUnary}
		if on(0) {
			env.Deadline = 1795995319695
		}
		if on(1) {
			env.Header = Metadata{"k": {"v"}}
		}
		if on(2) {
			env.ReplyTo = "reply"
		}
		if on(3) {
			env.Key = "key"
		}
		if on(4) {
			env.Retry = &RetryPolicy{MaxAttempts: mask % 3, InitialBackoff: int64(mask % 5), MaxBackoff: int64(mask % 2),
				Multiplier: float64(mask % 4), RetryableCodes: []uint32{uint32(mask % 17)}[:mask%2]}
		}
		if on(5) {
			env.Timeout = 1000
		}
		if on(6) {
			env.Replays = 1
		}
		same(t, fmt.Sprintf("request with omitempty fields %07b", mask), env)
	}
	for mask := range 1 << 5 {
		on := func(bit int) bool { return mask&(1<<bit) != 0 }
		env := &Response{Version: Version, ID: "id", Code: uint32(mask)}
		if on(0) {
			env.Message = "msg"
		}
		if on(1) {
			env.Details = [][]byte{[]byte("d")}
		}
		if on(2) {
			env.Header = Metadata{"h": {"v"}}
		}
		if on(3) {
			env.Trailer = Metadata{"t": nil}
		}
		if on(4) {
			env.Payload = []byte("p")
		}
		same(t, fmt.Sprintf("response with omitempty fields %05b", mask), env)
	}
	for mask := range 1 << 5 {
		on := func(bit int) bool { return mask&(1<<bit) != 0 }
		p := new(RetryPolicy)
		if on(0) {
			p.MaxAttempts = 3
		}
		if on(1) {
			p.InitialBackoff = 10
		}
		if on(2) {
			p.MaxBackoff = 1000
		}
		if on(3) {
			p.Multiplier = 2
		}
		if on(4) {
			p.RetryableCodes = []uint32{codeUnavailable}
		}
		env := &Request{Version: Version, ID: "id", Method: "s.S/M", Attempt: 1, Kind: KindAsync, Retry: p}
		same(t, fmt.Sprintf("retry policy with fields %05b", mask), env)
	}
}

// TestEnvelopeCodecRoundTrip checks that every field of a valid envelope
// survives EncodeRequest/DecodeRequest and EncodeResponse/DecodeResponse
// as it was, nil and empty values included.
func TestEnvelopeCodecRoundTrip(t *testing.T) {
	async := sampleRequests()["async with everything"]
	for name, in := range map[string]*Request{"unary": validRequest(), "async": async} {
		b, err := EncodeRequest(in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := DecodeRequest(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(out, in) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, out, in)
		}
	}
	if got := async.Header["nil"]; got != nil {
		t.Errorf("a nil header value came back as %#v", got)
	}
	if got := async.Header["empty"]; got == nil || len(got) != 0 {
		t.Errorf("an empty header value came back as %#v", got)
	}

	in := sampleResponses()["error with everything"]
	b, err := EncodeResponse(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) {
		t.Errorf("response:\n got %s\nwant %s", abbreviate(out), abbreviate(in))
	}
	if out.Details[1] != nil || out.Details[2] == nil {
		t.Errorf("details lost nil versus empty: %#v", out.Details[:3])
	}

	// Empty omitempty fields are left out, so they come back nil, as with
	// the reflection codec.
	b, err = EncodeResponse(sampleResponses()["empty collections"])
	if err != nil {
		t.Fatal(err)
	}
	if out, err = DecodeResponse(b); err != nil {
		t.Fatal(err)
	}
	if out.Details != nil || out.Header != nil || out.Trailer != nil || out.Payload != nil {
		t.Errorf("empty fields came back non-nil: %+v", out)
	}
}

// TestEnvelopePeeks checks peekVersion and PeekReplyAddress, which read
// envelopes that failed strict decoding: they skip whatever else is there,
// and a length the input cannot hold costs them no allocation.
func TestEnvelopePeeks(t *testing.T) {
	nested := []byte{0xd6, 0x05, 1, 2, 3, 4} // an extension value
	for range 3 {
		nested = append([]byte{0x81, 0xa1, 'k', 0x91}, nested...) // {"k": [nested]}
	}
	withExtras := rawMap(t, "zz", msgpack.RawMessage(nested), "id", "the-id", "v", 7, "r", "reply", "yy", []any{nil, true, 1.5, int64(-1 << 40), "s", []byte("b")})
	if got := peekVersion(withExtras); got != 7 {
		t.Errorf("peekVersion = %d, want 7", got)
	}
	if id, replyTo := PeekReplyAddress(withExtras); id != "the-id" || replyTo != "reply" {
		t.Errorf("PeekReplyAddress = %q, %q", id, replyTo)
	}
	if got := peekVersion(append(withExtras, 0xc1, 0xc1)); got != 7 {
		t.Errorf("peekVersion with trailing bytes = %d, want 7 (trailing bytes are ignored)", got)
	}

	huge := []byte{0x82, 0xa1, 'v', 0x07, 0xa2, 'z', 'z', 0xc6, 0xff, 0xff, 0xff, 0xff}
	if got := peekVersion(huge); got != -1 {
		t.Errorf("peekVersion with a 4 GiB field = %d, want -1", got)
	}
	// msgpack.Unmarshal allocated a MiB or more for it each time, and kept
	// what it allocated in its pool of decoders.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		peekVersion(huge)
	}
	runtime.ReadMemStats(&after)
	if perCall := (after.TotalAlloc - before.TotalAlloc) / 100; perCall > 64<<10 {
		t.Errorf("peekVersion allocated %d bytes for a length the input cannot hold", perCall)
	}

	deep := []byte{0x01}
	for range maxSkipDepth + 1 {
		deep = append([]byte{0x91}, deep...)
	}
	if got := peekVersion(rawMap(t, "v", 7, "zz", msgpack.RawMessage(deep))); got != -1 {
		t.Errorf("peekVersion past an overly nested value = %d, want -1", got)
	}
	for name, b := range map[string][]byte{"empty": nil, "garbage": []byte("\xff\x00 nope"), "int id": rawMap(t, "id", 1, "r", "x")} {
		if id, replyTo := PeekReplyAddress(b); id != "" || replyTo != "" {
			t.Errorf("PeekReplyAddress(%s) = %q, %q; want nothing", name, id, replyTo)
		}
	}
}

// TestEnvelopeAppendWritesEncodeBytes checks AppendRequest and
// AppendResponse against EncodeRequest and EncodeResponse: the same bytes
// after dst's own, written into dst's memory with no allocation when dst
// has the capacity RequestCap or ResponseCap gives.
func TestEnvelopeAppendWritesEncodeBytes(t *testing.T) {
	for name, env := range sampleRequests() {
		checkAppend(t, "request "+name, env, EncodeRequest, AppendRequest, RequestCap)
	}
	for name, env := range sampleResponses() {
		checkAppend(t, "response "+name, env, EncodeResponse, AppendResponse, ResponseCap)
	}
}

func checkAppend[T any](t *testing.T, name string, env *T, encode func(*T) ([]byte, error), appendTo func([]byte, *T) ([]byte, error), capFor func(*T) int) {
	t.Helper()
	want, err := encode(env)
	if err != nil {
		t.Fatalf("%s: encode: %v", name, err)
	}
	// Metadata is a map, written in its iteration order: compare what
	// the bytes decode to.
	same := func(b []byte) bool {
		var got, exp any
		return referenceDecode(b, &got) == nil && referenceDecode(want, &exp) == nil && reflect.DeepEqual(got, exp)
	}
	prefix := []byte("kept")
	got, err := appendTo(append([]byte(nil), prefix...), env)
	if err != nil {
		t.Fatalf("%s: append: %v", name, err)
	}
	if !bytes.Equal(got[:len(prefix)], prefix) || !same(got[len(prefix):]) {
		t.Fatalf("%s: append wrote %d bytes after dst's, unlike encode's %d, or changed dst's own", name, len(got)-len(prefix), len(want))
	}
	dst := make([]byte, 0, capFor(env))
	var out []byte
	allocs := testing.AllocsPerRun(20, func() {
		out, err = appendTo(dst, env)
	})
	if err != nil || !same(out) {
		t.Fatalf("%s: append into a buffer of its cap: %v, same envelope %v", name, err, same(out))
	}
	if &out[0] != &dst[:1][0] {
		t.Errorf("%s: append into a buffer of cap %d (envelope %d bytes) wrote into new memory", name, cap(dst), len(want))
	}
	if allocs != 0 && !raceEnabled {
		t.Errorf("%s: append into a buffer of its cap allocated %.0f times, want 0", name, allocs)
	}
}
