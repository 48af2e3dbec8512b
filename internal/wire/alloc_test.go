package wire

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
)

// What decoding may allocate for an input of n bytes: allocFactor*n +
// allocSlack. The factor is what Go's representation of the densest valid
// values costs: a msgpack nil, one byte, in a list of details is a 24-byte
// slice header, in a header's list of values a 16-byte string header. The
// slack covers the envelope struct itself and a pooled reader made anew
// (the race detector drops pooled values at random).
const (
	allocFactor = 32
	allocSlack  = 8 << 10
)

// TestDecodingAllocationIsBounded checks that no decoder allocates more
// than allocFactor times its input (plus allocSlack), in particular for
// inputs that declare huge lengths: a str32 header claiming 4 GiB followed
// by 10 bytes costs a decoder that trusts it 4 GiB.
func TestDecodingAllocationIsBounded(t *testing.T) {
	inputs := map[string][]byte{
		"str32 of 4 GiB": append([]byte{0xdb, 0xff, 0xff, 0xff, 0xff}, bytes.Repeat([]byte{'a'}, 10)...),
		"map32 of 4 G":   append([]byte{0xdf, 0xff, 0xff, 0xff, 0xff}, bytes.Repeat([]byte{0xc0}, 10)...),
		"empty":          nil,
	}
	add := func(kind string, seeds [][]byte) {
		for i, b := range seeds {
			inputs[fmt.Sprintf("%s seed %d", kind, i)] = b
		}
	}
	add("request", requestSeeds(t))
	add("response", responseSeeds(t))
	add("frame", frameSeeds(t))
	for name, env := range sampleRequests() {
		inputs["request "+name] = mustEncode(t, EncodeRequest, env)
	}
	for name, env := range sampleResponses() {
		inputs["response "+name] = mustEncode(t, EncodeResponse, env)
	}
	for name, fr := range sampleFrames() {
		inputs["frame "+name] = mustEncode(t, EncodeFrame, fr)
	}
	for name, b := range densestValues(t) {
		inputs[name] = b
	}

	decoders := map[string]func(b []byte, s string){
		"DecodeRequest":        func(b []byte, _ string) { _, _ = DecodeRequest(b) },
		"DecodeRequestString":  func(_ []byte, s string) { _, _ = DecodeRequestString(s) },
		"DecodeResponse":       func(b []byte, _ string) { _, _ = DecodeResponse(b) },
		"DecodeResponseString": func(_ []byte, s string) { _, _ = DecodeResponseString(s) },
		"DecodeFrame":          func(b []byte, _ string) { _, _ = DecodeFrame(b) },
		"DecodeFramesString":   func(_ []byte, s string) { _, _ = DecodeFramesString(s) },
		"PeekReplyAddress":     func(b []byte, _ string) { _, _ = PeekReplyAddress(b) },
	}
	worst, worstAt := 0.0, ""
	for name, b := range inputs {
		s := string(b)
		for decoder, decode := range decoders {
			got := allocated(func() { decode(b, s) })
			if limit := allocFactor*uint64(len(b)) + allocSlack; got > limit {
				t.Errorf("%s of %s (%d bytes) allocated %d bytes, more than %d", decoder, name, len(b), got, limit)
			}
			if r := float64(got) / float64(len(b)+1); len(b) > 1000 && r > worst {
				worst, worstAt = r, decoder+" of "+name
			}
		}
	}
	t.Logf("most allocated per input byte (inputs over 1000 bytes): %.1f, by %s", worst, worstAt)
}

// allocated returns the bytes one run of f allocates, averaged over a few
// runs after a first one that fills the pools.
func allocated(f func()) uint64 {
	const runs = 8
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / runs
}

// densestValues are valid envelopes made mostly of the values that cost
// the most memory per byte of input when decoded: lists of nils, and maps
// of one-letter keys.
func densestValues(t *testing.T) map[string][]byte {
	const n = 20000
	nils := make([]any, n)
	keys := make(map[string][]string, n)
	for i := range n {
		keys[fmt.Sprintf("%04x", i)] = nil
	}
	return map[string][]byte{
		"response with a list of nil details":  rawMap(t, "v", 1, "id", "i", "c", 0, "x", nils),
		"request with a header of nil values":  rawMap(t, validRequestFields("h", map[string]any{"k": nils})...),
		"request with a header of nil entries": rawMap(t, validRequestFields("h", keys)...),
		"request with many retryable codes":    rawMap(t, "v", 1, "id", "i", "m", "s.S/M", "a", 1, "k", 2, "rp", map[string]any{"c": make([]uint32, n)}),
		"frames back to back": bytes.Repeat(mustEncode(t, EncodeFrame,
			&Frame{Version: StreamVersion, ID: "i", Type: FrameHeader}), n/10),
	}
}
