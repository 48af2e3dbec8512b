package wire

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestWriterFormsMatchMsgpack checks each value form the envelope writer
// appends against what msgpack's encoder writes for the same Go value, at
// every length and number where msgpack changes form (fix, 8, 16 and 32
// bits), so that the envelopes stay byte for byte those msgpack.Marshal
// writes (see TestEnvelopeCodecWritesReflectionBytes for whole envelopes).
func TestWriterFormsMatchMsgpack(t *testing.T) {
	same := func(what string, write func(w *envelopeWriter), encode func(e *msgpack.Encoder) error) {
		t.Helper()
		var want bytes.Buffer
		if err := encode(msgpack.NewEncoder(&want)); err != nil {
			t.Fatal(err)
		}
		w := newAppendingWriter([]byte{0x01}) // appends after what is there
		write(&w)
		if got := w.buf; got[0] != 0x01 || !bytes.Equal(got[1:], want.Bytes()) {
			t.Errorf("%s: wrote %x; msgpack writes %x", what, got[1:], want.Bytes())
		}
	}
	// value writes a field with a one-letter key and keeps its value.
	value := func(field func(w *envelopeWriter)) func(w *envelopeWriter) {
		return func(w *envelopeWriter) {
			field(w)
			w.buf = append(w.buf[:1], w.buf[3:]...)
		}
	}
	lengths := []int{0, 1, 15, 16, 31, 32, 255, 256, math.MaxUint16, math.MaxUint16 + 1}
	for _, n := range lengths {
		s := strings.Repeat("x", n)
		same(fmt.Sprint("string of ", n), func(w *envelopeWriter) { w.str(s) }, func(e *msgpack.Encoder) error { return e.EncodeString(s) })
		b := []byte(s)
		same(fmt.Sprint("bytes of ", n), func(w *envelopeWriter) { w.bin(b) }, func(e *msgpack.Encoder) error { return e.EncodeBytes(b) })
		same(fmt.Sprint("map of ", n), func(w *envelopeWriter) { w.mapLen(n) }, func(e *msgpack.Encoder) error { return e.EncodeMapLen(n) })
		same(fmt.Sprint("array of ", n), func(w *envelopeWriter) { w.arrayLen(n) }, func(e *msgpack.Encoder) error { return e.EncodeArrayLen(n) })
	}
	same("nil bytes", func(w *envelopeWriter) { w.bin(nil) }, func(e *msgpack.Encoder) error { return e.EncodeBytes(nil) })
	ints := []int64{0, 1, 127, 128, 255, 256, math.MaxUint16, math.MaxUint16 + 1, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -32, -33, math.MinInt8, math.MinInt8 - 1, math.MinInt16, math.MinInt16 - 1, math.MinInt32, math.MinInt32 - 1, math.MinInt64}
	for _, n := range ints {
		same(fmt.Sprint("int ", n), value(func(w *envelopeWriter) { w.int("k", int(n)) }),
			func(e *msgpack.Encoder) error { return e.EncodeInt(n) })
		same(fmt.Sprint("int64 ", n), value(func(w *envelopeWriter) { w.int64("k", n) }),
			func(e *msgpack.Encoder) error { return e.EncodeInt64(n) })
	}
	for _, n := range []uint32{0, 1, 255, math.MaxUint32} {
		same(fmt.Sprint("uint32 ", n), value(func(w *envelopeWriter) { w.uint32("k", n) }),
			func(e *msgpack.Encoder) error { return e.EncodeUint32(n) })
		same(fmt.Sprint("uint8 ", uint8(n)), value(func(w *envelopeWriter) { w.uint8("k", uint8(n)) }),
			func(e *msgpack.Encoder) error { return e.EncodeUint8(uint8(n)) })
	}
	for _, f := range []float64{0, -1.5, math.Inf(1), math.MaxFloat64} {
		same("float64", value(func(w *envelopeWriter) { w.float64("k", f) }),
			func(e *msgpack.Encoder) error { return e.EncodeFloat64(f) })
	}
	for _, b := range []bool{false, true} {
		same("bool", value(func(w *envelopeWriter) { w.bool("k", b) }),
			func(e *msgpack.Encoder) error { return e.EncodeBool(b) })
	}
}
