package wire

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// The fuzz targets of the msgpack decoders, which read what any writer of
// Redis may have put there. Each is seeded with what the package's own
// encoder writes (the samples of the codec tests), with what the v1
// runtime wrote in a real run (testdata/v1-captured.json) and with the
// files under testdata/fuzz, and checks that
//
//   - no input panics the decoder, and the copying and in-place decoders
//     agree;
//   - what decodes encodes and decodes again to the same value;
//   - what is refused is refused with an error that names what was being
//     read and what is wrong with it (not a bare "EOF");
//   - the decoder agrees with msgpack's reflection decoder, which wrote
//     and read the envelopes already in Redis.
//
// `make test` runs each target for a few seconds (scripts/fuzz.sh), `make
// fuzz` for longer; go test alone runs their seeds.

// seedLimit leaves the large samples out of the seeds: the fuzzer mutates
// small inputs faster, and the codec tests cover the large ones.
const seedLimit = 4 << 10

// requestSeeds are encoded requests, small enough to mutate quickly.
func requestSeeds(tb testing.TB) [][]byte {
	seeds := [][]byte{{0x80}, {0xc0}}
	for _, env := range sampleRequests() {
		if b, err := EncodeRequest(env); err == nil && len(b) < seedLimit {
			seeds = append(seeds, b)
		}
	}
	c := loadV1Captured(tb)
	for _, s := range []string{c.UnaryRequest, c.FailedRequest, c.AsyncRequest, c.AsyncKeyRequest} {
		seeds = append(seeds, unhex(tb, s))
	}
	seeds = append(seeds, signedSeeds(tb)...)
	return append(seeds, hugeLengthInputs(tb, mustEncode(tb, EncodeRequest, validRequest()))...)
}

// signedSeeds are a signed and a signed-and-sealed request
// (SignedVersion).
func signedSeeds(tb testing.TB) [][]byte {
	key := testKey(tb, 0)
	signed, sealed := validRequest(), validRequest()
	key.SignRequest(signed, "alice")
	if err := key.SealRequest(sealed); err != nil {
		tb.Fatal(err)
	}
	key.SignRequest(sealed, "alice")
	return [][]byte{mustEncode(tb, EncodeRequest, signed), mustEncode(tb, EncodeRequest, sealed)}
}

// responseSeeds is requestSeeds for responses.
func responseSeeds(tb testing.TB) [][]byte {
	seeds := [][]byte{{0x80}, {0xc0}}
	for _, env := range sampleResponses() {
		if b, err := EncodeResponse(env); err == nil && len(b) < seedLimit {
			seeds = append(seeds, b)
		}
	}
	c := loadV1Captured(tb)
	seeds = append(seeds, unhex(tb, c.UnaryResponse), unhex(tb, c.FailedResponse))
	ok := &Response{Version: Version, ID: "id", Payload: []byte("payload"), Header: Metadata{"k": {"v"}}}
	key := testKey(tb, 0)
	signed, sealed := *ok, *ok
	key.SignResponse(&signed)
	if err := key.SealResponse(&sealed); err != nil {
		tb.Fatal(err)
	}
	key.SignResponse(&sealed)
	seeds = append(seeds, mustEncode(tb, EncodeResponse, &signed), mustEncode(tb, EncodeResponse, &sealed))
	return append(seeds, hugeLengthInputs(tb, mustEncode(tb, EncodeResponse, ok))...)
}

// frameSeeds are encoded frames, one alone and several back to back.
func frameSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	var all []byte
	for _, fr := range sampleFrames() {
		if b, err := EncodeFrame(fr); err == nil && len(b) < seedLimit {
			seeds = append(seeds, b)
			all = append(all, b...)
		}
	}
	accept := &Frame{Version: StreamVersion, ID: "id", Type: FrameAccept, Inbox: "rpr:v1:{s.S}:in:w1", Worker: "w1", Window: 64, WindowBytes: 1 << 20}
	return append(append(seeds, all), hugeLengthInputs(tb, mustEncode(tb, EncodeFrame, accept))...)
}

func mustEncode[T any](tb testing.TB, encode func(*T) ([]byte, error), v *T) []byte {
	tb.Helper()
	b, err := encode(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// FuzzDecodeRequest fuzzes DecodeRequest, DecodeRequestString and
// DecodeRequestStringInto, and the
// peeks (peekVersion, PeekReplyAddress) that read a refused request.
func FuzzDecodeRequest(f *testing.F) {
	for _, b := range requestSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := DecodeRequest(b) // must never panic
		inPlace, errInPlace := DecodeRequestString(string(b))
		checkSameOutcome(t, b, env, err, inPlace, errInPlace)
		into := new(Request)
		if errInto := DecodeRequestStringInto(string(b), into); errInto != nil {
			checkSameOutcome(t, b, env, err, nil, errInto)
		} else {
			checkSameOutcome(t, b, env, err, into, nil)
		}
		if err != nil {
			checkRefusal(t, b, err, "malformed envelope: ")
		} else {
			replies := env.Kind == KindUnary || env.Kind == KindStream
			if env.ID == "" || env.Method == "" || replies == (env.ReplyTo == "") {
				t.Fatalf("accepted an envelope without id, method, or a reply-to stream that fits its kind: %+v", env)
			}
			again, err := DecodeRequest(mustEncode(t, EncodeRequest, env))
			if err != nil {
				t.Fatalf("%x decodes, but its encoding again does not: %v", b, err)
			}
			checkSame(t, b, requestAsEncoded(env), again)
		}
		checkAgainstReference(t, b, decodeRequestInPlace)
		checkPeeksAgainstReference(t, b)
	})
}

// FuzzDecodeResponse is FuzzDecodeRequest for responses.
func FuzzDecodeResponse(f *testing.F) {
	for _, b := range responseSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := DecodeResponse(b) // must never panic
		inPlace, errInPlace := DecodeResponseString(string(b))
		checkSameOutcome(t, b, env, err, inPlace, errInPlace)
		into := new(Response)
		if errInto := DecodeResponseStringInto(string(b), into); errInto != nil {
			checkSameOutcome(t, b, env, err, nil, errInto)
		} else {
			checkSameOutcome(t, b, env, err, into, nil)
		}
		if err != nil {
			checkRefusal(t, b, err, "malformed envelope: ", "malformed response envelope: ")
		} else {
			if env.ID == "" {
				t.Fatalf("accepted a response without a request id: %+v", env)
			}
			again, err := DecodeResponse(mustEncode(t, EncodeResponse, env))
			if err != nil {
				t.Fatalf("%x decodes, but its encoding again does not: %v", b, err)
			}
			checkSame(t, b, responseAsEncoded(env), again)
		}
		checkAgainstReference(t, b, decodeResponseInPlace)
		checkPeeksAgainstReference(t, b)
	})
}

// FuzzDecodeFrame fuzzes DecodeFrame and DecodeFramesString, which reads
// the frames one stream entry carries back to back.
func FuzzDecodeFrame(f *testing.F) {
	for _, b := range frameSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b) // must never panic
		if err != nil {
			checkRefusal(t, b, err, "malformed frame: ")
		} else if fr.ID == "" {
			t.Fatalf("accepted a frame without an id: %+v", fr)
		}
		frames, err := DecodeFramesString(string(b))
		if err != nil {
			checkRefusal(t, b, err, "malformed frame: ")
		}
		if fr != nil && (len(frames) != 1 || !reflect.DeepEqual(frames[0], fr)) {
			t.Fatalf("%x: DecodeFrame read %+v, DecodeFramesString %d frames", b, fr, len(frames))
		}
		// The frames before a bad one re-encode, back to back, to a value
		// that decodes to the same frames.
		var value []byte
		for _, fr := range frames {
			value = append(value, mustEncode(t, EncodeFrame, fr)...)
		}
		if len(frames) > 0 {
			again, err := DecodeFramesString(string(value))
			if err != nil {
				t.Fatalf("%x decodes to %d frames, but their encoding again does not: %v", b, len(frames), err)
			}
			want := make([]*Frame, len(frames))
			for i, fr := range frames {
				want[i] = frameAsEncoded(fr)
			}
			checkSame(t, b, want, again)
		}
		checkAgainstReference(t, b, decodeFrameInPlace)
	})
}

// checkSameOutcome fails unless the copying and the in-place decoder read
// b alike.
func checkSameOutcome[T any](t *testing.T, b []byte, got *T, err error, inPlace *T, errInPlace error) {
	t.Helper()
	if (err == nil) != (errInPlace == nil) || (err != nil && err.Error() != errInPlace.Error()) {
		t.Fatalf("%x: the decoders disagree: %v; in place: %v", b, err, errInPlace)
	}
	if !reflect.DeepEqual(withoutNaN(got), withoutNaN(inPlace)) {
		t.Fatalf("%x: the decoders disagree:\n %+v\n in place %+v", b, got, inPlace)
	}
}

// checkSame fails unless a round trip of what b decoded to gave want.
func checkSame[T any](t *testing.T, b []byte, want, got T) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("%x changed in a round trip:\n was %+v\n now %+v", b, abbreviate(want), abbreviate(got))
	}
}

// checkRefusal fails unless err, the decoder's refusal of b, starts with
// one of prefixes (what was being read) or is a VersionError, and says
// more than that the input ended.
func checkRefusal(t *testing.T, b []byte, err error, prefixes ...string) {
	t.Helper()
	msg := err.Error()
	if _, ok := err.(VersionError); ok {
		return
	}
	named := false
	for _, p := range prefixes {
		named = named || strings.HasPrefix(msg, p) && len(msg) > len(p)
	}
	if !named {
		t.Fatalf("%x: the error %q does not start with %q", b, msg, prefixes)
	}
	if strings.HasSuffix(msg, "EOF") {
		t.Fatalf("%x: the error %q does not say what is wrong", b, msg)
	}
}

// requestAsEncoded returns a copy of env as it reads after a round trip:
// fields the encoder leaves out when empty read as nil.
func requestAsEncoded(env *Request) *Request {
	c := *env
	if len(c.Header) == 0 {
		c.Header = nil
	}
	if c.Retry != nil {
		p := *c.Retry
		if len(p.RetryableCodes) == 0 {
			p.RetryableCodes = nil
		}
		c.Retry = &p
	}
	return withoutNaN(&c)
}

// responseAsEncoded is requestAsEncoded for responses.
func responseAsEncoded(env *Response) *Response {
	c := *env
	if len(c.Details) == 0 {
		c.Details = nil
	}
	if len(c.Header) == 0 {
		c.Header = nil
	}
	if len(c.Trailer) == 0 {
		c.Trailer = nil
	}
	if len(c.Payload) == 0 {
		c.Payload = nil
	}
	return &c
}

// frameAsEncoded is requestAsEncoded for frames.
func frameAsEncoded(f *Frame) *Frame {
	c := *f
	if len(c.Header) == 0 {
		c.Header = nil
	}
	if len(c.Payload) == 0 {
		c.Payload = nil
	}
	return &c
}

// hugeLengthInputs returns, for each value of the encoded envelope b, b up
// to that value followed by a header of each variable-length type that
// claims 4 GiB (or 4 billion entries), and ten bytes: the inputs a decoder
// that trusts a length allocates gigabytes for.
func hugeLengthInputs(tb testing.TB, b []byte) [][]byte {
	tb.Helper()
	var inputs [][]byte
	for _, at := range valueOffsets(tb, b) {
		for _, code := range []byte{0xdb, 0xc6, 0xdd, 0xdf, 0xc9} { // str32, bin32, array32, map32, ext32
			in := append(bytes.Clone(b[:at]), code, 0xff, 0xff, 0xff, 0xff)
			if code == 0xc9 {
				in = append(in, 0x01) // the extension type
			}
			inputs = append(inputs, append(in, bytes.Repeat([]byte{0x01}, 10)...))
		}
	}
	return inputs
}

// valueOffsets returns where each top-level value of the envelope b
// starts.
func valueOffsets(tb testing.TB, b []byte) []int {
	tb.Helper()
	var offsets []int
	err := scanEnvelope(b, func(r *envelopeReader, _ []byte) error {
		offsets = append(offsets, len(b)-r.src.Len())
		return r.skip()
	})
	if err != nil {
		tb.Fatalf("scan %x: %v", b, err)
	}
	return offsets
}
