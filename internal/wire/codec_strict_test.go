package wire

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// rawMap builds an envelope from fields, in the order given, for the
// strictness tests; values are written by msgpack.Marshal.
func rawMap(t *testing.T, kv ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	if err := enc.EncodeMapLen(len(kv) / 2); err != nil {
		t.Fatal(err)
	}
	for _, v := range kv {
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// validRequestFields is validRequest as key-value pairs for rawMap.
func validRequestFields(extra ...any) []any {
	kv := []any{"v", 1, "id", "id", "m", "s.S/M", "dl", 10, "r", "reply", "t", 5, "a", 1, "k", 1, "p", []byte{1}}
	return append(kv, extra...)
}

// TestEnvelopeCodecStrictness checks what the decoder refuses, and that
// each error says where the problem is.
func TestEnvelopeCodecStrictness(t *testing.T) {
	good := rawMap(t, validRequestFields()...)
	if _, err := DecodeRequest(good); err != nil {
		t.Fatalf("the valid base envelope: %v", err)
	}
	for name, tc := range map[string]struct {
		raw  []byte
		want []string
	}{
		"unknown field":           {rawMap(t, validRequestFields("zz", 1)...), []string{"malformed envelope", `unknown field "zz"`}},
		"long unknown field":      {rawMap(t, validRequestFields("a-rather-long-field-name", 1)...), []string{`unknown field "a-rather-long-field-name"`}},
		"nil field name":          {rawMap(t, validRequestFields(nil, 1)...), []string{`unknown field ""`}},
		"unknown retry field":     {rawMap(t, validRequestFields("rp", map[string]any{"zz": 1})...), []string{`field "rp": unknown field "zz"`}},
		"response field":          {rawMap(t, validRequestFields("msg", "hello")...), []string{`unknown field "msg"`}},
		"trailing bytes":          {append(good, 0xc0), []string{"malformed envelope: 1 trailing bytes"}},
		"string for an int":       {rawMap(t, validRequestFields("dl", "soon")...), []string{`field "dl"`, "decoding int64"}},
		"int for a string":        {rawMap(t, validRequestFields("id", 42)...), []string{`field "id"`}},
		"array for bytes":         {rawMap(t, validRequestFields("p", []int{1})...), []string{`field "p"`}},
		"string for header":       {rawMap(t, validRequestFields("h", "k=v")...), []string{`field "h"`}},
		"int in header values":    {rawMap(t, validRequestFields("h", map[string]any{"k": []any{1}})...), []string{`field "h": "k": element 0`}},
		"string for retry policy": {rawMap(t, validRequestFields("rp", "fast")...), []string{`field "rp"`, "not a msgpack map"}},
		"string for a code":       {rawMap(t, validRequestFields("rp", map[string]any{"c": []any{"x"}})...), []string{`field "rp": field "c": element 0`}},
		"float for an int":        {rawMap(t, validRequestFields("a", 1.0)...), []string{`field "a"`}},
		"kind out of range":       {rawMap(t, validRequestFields("k", 257)...), []string{`field "k"`, "out of range"}},
		"negative kind":           {rawMap(t, validRequestFields("k", -1)...), []string{`field "k"`, "out of range"}},
		"array envelope":          {[]byte{0x91, 0x01}, []string{"malformed envelope", "not a msgpack map"}},
		"nil envelope":            {[]byte{0xc0}, []string{"malformed envelope: no version"}},
		"empty input":             {nil, []string{"malformed envelope: empty"}},
		"truncated":               {good[:len(good)-1], []string{"malformed envelope", `field "p"`}},
		"truncated in a value":    {[]byte{0x81, 0xa1, 'v', 0xd3, 0x00}, []string{`malformed envelope: field "v": the input ends in the middle of a value`}},
		"huge map":                {[]byte{0xdf, 0xff, 0xff, 0xff, 0xff}, []string{"exceeds the bytes left"}},
		"huge payload":            {[]byte{0x82, 0xa1, 'v', 0x01, 0xa1, 'p', 0xc6, 0xff, 0xff, 0xff, 0xff}, []string{`field "p"`, "exceeds the bytes left"}},
		"no version":              {rawMap(t, "id", "id"), []string{"malformed envelope: no version"}},
		"newer version":           {rawMap(t, validRequestFields("v", 7)...), []string{"version 7 is not supported"}},
		"newer, with new fields":  {rawMap(t, validRequestFields("v", 7, "zz", 1)...), []string{"version 7 is not supported"}},
		"newer, with a new type":  {rawMap(t, validRequestFields("v", 7, "id", 42)...), []string{"version 7 is not supported"}},
		"newer, truncated":        {[]byte{0x82, 0xa1, 'v', 0x07, 0xa2, 'i', 'd', 0xa3, 'x'}, []string{"malformed envelope", `field "id"`}}, // the version is unreadable too
	} {
		_, err := DecodeRequest(tc.raw)
		if err == nil {
			t.Errorf("%s: decoded", name)
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: err = %v, want it to mention %q", name, err, want)
			}
		}
	}

	var verr VersionError
	unknown := SignedVersion + 1 // the first version this runtime does not speak
	if _, err := DecodeRequest(rawMap(t, validRequestFields("v", unknown, "zz", 1)...)); !errors.As(err, &verr) || verr.Got != unknown {
		t.Errorf("version %d: err = %v, want VersionError{%d}", unknown, err, unknown)
	}
	if _, err := DecodeResponse(rawMap(t, "v", unknown, "id", "id", "c", "not a code")); !errors.As(err, &verr) || verr.Got != unknown {
		t.Errorf("response version %d: err = %v, want VersionError{%d}", unknown, err, unknown)
	}
	for name, tc := range map[string]struct {
		raw  []byte
		want string
	}{
		"unknown field":    {rawMap(t, "v", 1, "id", "id", "m", "s.S/M"), `unknown field "m"`},
		"string for code":  {rawMap(t, "v", 1, "id", "id", "c", "NOT_FOUND"), `field "c"`},
		"code too big":     {rawMap(t, "v", 1, "id", "id", "c", int64(math.MaxUint32)+1), "out of range"},
		"bytes detail":     {rawMap(t, "v", 1, "id", "id", "x", []byte("d")), `field "x"`},
		"trailing bytes":   {append(rawMap(t, "v", 1, "id", "id"), 0x00), "1 trailing bytes"},
		"no id":            {rawMap(t, "v", 1), "no request id"},
		"no version":       {rawMap(t, "id", "id"), "no version"},
		"int trailer keys": {rawMap(t, "v", 1, "id", "id", "tr", map[int]any{1: []string{"v"}}), `field "tr": key`},
	} {
		_, err := DecodeResponse(tc.raw)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("response %s: err = %v, want it to mention %q", name, err, tc.want)
		}
	}
}

// TestEnvelopeCodecLeniency checks that the decoder still takes what the
// reflection decoder took from other writers: any integer width, nil for
// a zero value, bin for a string and str for bytes, and repeated keys
// (the last wins; header maps merge).
func TestEnvelopeCodecLeniency(t *testing.T) {
	for name, raw := range map[string][]byte{
		"wide ints": rawMap(t, "v", uint64(1), "id", "id", "m", "s.S/M", "dl", int8(10), "r", "reply",
			"t", uint16(5), "a", int32(1), "k", int64(1), "p", nil),
		"nil values":       rawMap(t, validRequestFields("ik", nil, "to", nil, "rp", nil, "h", nil)...),
		"bin for a string": rawMap(t, validRequestFields("m", []byte("s.S/M"), []byte("ik"), []byte("key"))...),
		"str for bytes":    rawMap(t, validRequestFields("p", "payload")...),
		"repeated keys": rawMap(t, validRequestFields("h", map[string][]string{"a": {"1"}}, "h", map[string][]string{"b": {"2"}},
			"rp", map[string]any{"n": 2}, "rp", map[string]any{"m": 1.5}, "a", 2)...),
		"ext before header map": rawMap(t, validRequestFields("h", msgpack.RawMessage{0xd4, 0x01, 0x81, 0xa1, 'k', 0x90})...),
		"float32 multiplier":    rawMap(t, validRequestFields("rp", map[string]any{"m": float32(1.5)})...),
		"int multiplier":        rawMap(t, validRequestFields("rp", map[string]any{"m": 2})...),
	} {
		want, got := new(Request), new(Request)
		if err := referenceDecode(raw, want); err != nil {
			t.Fatalf("%s: the reflection decoder refuses the input: %v", name, err)
		}
		if err := decodeRequestFields(raw, shareNothing, got); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
	}
}

// checkAgainstReference decodes b with the codec and with the reflection
// decoder and fails unless both refuse it or both decode it to the same
// value. The codec refuses a few inputs the reflection decoder took on
// purpose (see errNotMap and errOutOfRange), and input it finds truncated
// is not given to the reflection decoder, which may try to allocate the
// gigabytes that a length claims before it finds out.
func checkAgainstReference[T any](t *testing.T, b []byte, decode func([]byte, *T) error) {
	got, want := new(T), new(T)
	err := decode(b, got)
	if errors.Is(err, errNotMap) || errors.Is(err, errOutOfRange) || errors.Is(err, errTruncated) {
		return
	}
	refErr := referenceDecode(b, want)
	switch {
	case err == nil && refErr != nil:
		t.Fatalf("the codec decodes %x, which the reflection decoder refuses: %v", b, refErr)
	case err != nil && refErr == nil:
		t.Fatalf("the codec refuses %x, which the reflection decoder decodes: %v", b, err)
	case err == nil && !reflect.DeepEqual(withoutNaN(got), withoutNaN(want)):
		t.Fatalf("%x decodes differently:\n codec      %+v\n reflection %+v", b, got, want)
	}
}

// checkPeeksAgainstReference checks that peekVersion and PeekReplyAddress
// read b as msgpack.Unmarshal did when they used it (with a decoder of its
// own here, since the library's pooled ones keep what a bad length made
// them allocate). They may refuse what it took in two ways, on purpose:
// an envelope that is not a map, and values nested deeper than any
// envelope nests.
func checkPeeksAgainstReference(t *testing.T, b []byte) {
	var head struct {
		Version int `msgpack:"v"`
	}
	var addr struct {
		ID      string `msgpack:"id"`
		ReplyTo string `msgpack:"r"`
	}
	version, id, replyTo := -1, "", ""
	if msgpack.NewDecoder(bytes.NewReader(b)).Decode(&head) == nil {
		version = head.Version
	}
	if msgpack.NewDecoder(bytes.NewReader(b)).Decode(&addr) == nil {
		id, replyTo = addr.ID, addr.ReplyTo
	}
	gotVersion := peekVersion(b)
	gotID, gotReplyTo := PeekReplyAddress(b)
	if gotVersion == version && gotID == id && gotReplyTo == replyTo {
		return
	}
	err := scanEnvelope(b, func(r *envelopeReader, _ []byte) error { return r.skip() })
	if errors.Is(err, errNotMap) || errors.Is(err, errTooDeep) {
		return
	}
	t.Fatalf("%x: peeks read version %d, id %q, reply-to %q; msgpack.Unmarshal read %d, %q, %q (scan: %v)",
		b, gotVersion, gotID, gotReplyTo, version, id, replyTo, err)
}

// withoutNaN replaces a NaN multiplier, which reflect.DeepEqual finds
// unequal to itself, by a stand-in; it returns v.
func withoutNaN[T any](v *T) *T {
	if env, ok := any(v).(*Request); ok && env != nil && env.Retry != nil && math.IsNaN(env.Retry.Multiplier) {
		env.Retry.Multiplier = -42
	}
	return v
}
