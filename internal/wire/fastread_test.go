package wire

import (
	"bytes"
	"fmt"
	"testing"
)

// TestFastPathsMatchDecoder checks each fast path of envelopeReader
// against the msgpack.Decoder it stands in for, on every header form it
// reads and at the edges of each width: the same value, the same bytes
// consumed, and, where it declines, the input left untouched for the
// decoder.
func TestFastPathsMatchDecoder(t *testing.T) {
	be := func(code byte, width int, v uint64) []byte {
		b := []byte{code}
		for i := width - 1; i >= 0; i-- {
			b = append(b, byte(v>>(8*i)))
		}
		return b
	}
	ints := [][]byte{
		{0x00}, {0x7f}, {0xe0}, {0xff}, {0xc0},
		be(0xcc, 1, 0xff), be(0xd0, 1, 0x80), be(0xcd, 2, 0xffff), be(0xd1, 2, 0x8000),
		be(0xce, 4, 0xffffffff), be(0xd2, 4, 0x80000000),
		be(0xcf, 8, 1<<63), be(0xd3, 8, 1<<63), be(0xcf, 8, 42),
		{0xcd, 0x01}, {0xcf}, {0xca, 0, 0, 0, 0}, {0xa1, 'x'}, // truncated, a float, a string
	}
	for _, in := range ints {
		t.Run(fmt.Sprintf("int %x", in), func(t *testing.T) {
			compare(t, in, func(r *envelopeReader) (any, bool) { return r.fastInt() },
				func(r *envelopeReader) (any, error) { return r.dec.DecodeInt64() })
			compare(t, in, func(r *envelopeReader) (any, bool) { n, ok := r.fastInt(); return uint64(n), ok },
				func(r *envelopeReader) (any, error) { return r.dec.DecodeUint64() })
		})
	}
	long := bytes.Repeat([]byte{'a'}, 70000)
	strs := [][]byte{
		{0xa0}, append([]byte{0xbf}, long[:31]...), {0xc0},
		append([]byte{0xd9, 200}, long[:200]...), append([]byte{0xc4, 3}, "abc"...),
		append([]byte{0xda, 0x01, 0x00}, long[:256]...), append([]byte{0xc5, 0x00, 0x01}, 'z'),
		append(be(0xdb, 4, 70000), long...), append(be(0xc6, 4, 1), 'q'),
		{0xd9}, {0xda, 0x01}, {0x01}, // truncated headers, an int
	}
	for _, in := range strs {
		t.Run(fmt.Sprintf("bytes %x", in[:min(len(in), 5)]), func(t *testing.T) {
			compare(t, in, func(r *envelopeReader) (any, bool) { return r.fastBytesLen() },
				func(r *envelopeReader) (any, error) { return r.dec.DecodeBytesLen() })
		})
	}
	maps := [][]byte{
		{0x80}, {0x81, 0x01, 0x02}, {0x8f}, {0xc0}, append([]byte{0xde, 0x00, 0x01}, 0x01, 0x02),
		{0xde, 0x00, 0x05, 0x01}, {0xde, 0x00}, append(be(0xdf, 4, 1), 0x01, 0x02), {0x90},
	}
	for _, in := range maps {
		t.Run(fmt.Sprintf("map %x", in), func(t *testing.T) {
			compare(t, in, func(r *envelopeReader) (any, bool) { return r.fastMapLen() },
				func(r *envelopeReader) (any, error) { return r.dec.DecodeMapLen() })
		})
	}
	arrays := [][]byte{
		{0x90}, {0x91, 0x01}, {0x9f}, {0xc0}, append([]byte{0xdc, 0x00, 0x01}, 0x01),
		{0xdc, 0x00, 0x05}, {0xdc}, append(be(0xdd, 4, 1), 0x01), {0x80},
	}
	for _, in := range arrays {
		t.Run(fmt.Sprintf("array %x", in), func(t *testing.T) {
			compare(t, in, func(r *envelopeReader) (any, bool) { return r.fastArrayLen() },
				func(r *envelopeReader) (any, error) { return r.dec.DecodeArrayLen() })
		})
	}
}

// compare reads in once with fast and once with slow. Where fast reads a
// value, slow must read the same one and stop at the same byte; where
// fast declines, it must have read nothing.
func compare[T any](t *testing.T, in []byte, fast func(*envelopeReader) (T, bool), slow func(*envelopeReader) (T, error)) {
	t.Helper()
	var got, want T
	var ok bool
	var slowErr error
	var fastLeft, slowLeft int
	_ = readEnvelope(in, shareNothing, func(r *envelopeReader) error {
		got, ok = fast(r)
		fastLeft = r.src.Len()
		return nil
	})
	_ = readEnvelope(in, shareNothing, func(r *envelopeReader) error {
		want, slowErr = slow(r)
		slowLeft = r.src.Len()
		return nil
	})
	switch {
	case !ok && fastLeft != len(in):
		t.Errorf("%x: the fast path declined after reading %d bytes", in, len(in)-fastLeft)
	case ok && slowErr != nil:
		t.Errorf("%x: the fast path read %v, the decoder refused it: %v", in, got, slowErr)
	case ok && (fmt.Sprint(got) != fmt.Sprint(want) || fastLeft != slowLeft):
		t.Errorf("%x: the fast path read %v leaving %d bytes, the decoder %v leaving %d", in, got, fastLeft, want, slowLeft)
	}
}
