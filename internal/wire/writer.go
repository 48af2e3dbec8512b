package wire

import (
	"bytes"
	"encoding/binary"
	"math"
	"sync"
)

// The codec's writing half: a writer that appends an envelope field by
// field (see EncodeRequest), in the msgpack forms msgpack.Marshal writes
// for the envelope's Go types, byte for byte.
//
// It appends to a byte slice itself rather than through a msgpack.Encoder:
// the encoder writes each value through an io.Writer, and those calls
// were most of what encoding an envelope cost (a twentieth of a caller's
// CPU per call, and of a server's). The reader stays msgpack's, which is
// where hostile input is met. Tests check every form against the
// encoder's output, at each length and value where the form changes.

// maxPooledEnvelope caps the buffers kept for reuse, so that one huge
// payload does not pin its memory in the pool.
const maxPooledEnvelope = 64 << 10

// msgpack's type codes for the forms the writer uses.
const (
	codeNil      = 0xc0
	codeFalse    = 0xc2
	codeTrue     = 0xc3
	codeBin8     = 0xc4
	codeBin16    = 0xc5
	codeBin32    = 0xc6
	codeFloat64  = 0xcb
	codeUint8    = 0xcc
	codeUint16   = 0xcd
	codeUint32   = 0xce
	codeUint64   = 0xcf
	codeInt8     = 0xd0
	codeInt16    = 0xd1
	codeInt32    = 0xd2
	codeInt64    = 0xd3
	codeStr8     = 0xd9
	codeStr16    = 0xda
	codeStr32    = 0xdb
	codeArray16  = 0xdc
	codeArray32  = 0xdd
	codeMap16    = 0xde
	codeMap32    = 0xdf
	codeFixMap   = 0x80
	codeFixArray = 0x90
	codeFixStr   = 0xa0
)

// envelopeWriter appends one envelope to buf. Appending cannot fail, so
// the field-by-field code of EncodeRequest and EncodeResponse reads as
// the wire format it writes.
type envelopeWriter struct {
	buf []byte
	// owned: the writer is not from the pool (newEnvelopeWriter) and its
	// buffer is the result.
	owned bool
}

// envelopeWriters holds writers whose buffers are reused.
var envelopeWriters = sync.Pool{New: func() any { return new(envelopeWriter) }}

// newAppendingWriter returns a writer that appends to dst; result
// returns dst with what was written.
func newAppendingWriter(dst []byte) envelopeWriter {
	return envelopeWriter{buf: dst, owned: true}
}

// envelopeFields bounds what an envelope's fields other than its bulk
// (payload, sealed part, message, metadata) take: keys, ids, method,
// reply-to, numbers.
const envelopeFields = 1 << 10

// newEnvelopeWriter returns an empty writer for an envelope whose bulk
// (payload, sealed part, message, metadata) is about bulk bytes: one
// from the pool, or, for an envelope too big to pool, a writer of its own
// whose buffer holds it whole from the start, so that a large payload is
// copied once, into the envelope it returns, instead of again at each
// doubling of a growing buffer and then into a copy of that.
func newEnvelopeWriter(bulk int) *envelopeWriter {
	if bulk+envelopeFields <= maxPooledEnvelope {
		return envelopeWriters.Get().(*envelopeWriter)
	}
	return &envelopeWriter{buf: make([]byte, 0, bulk+envelopeFields), owned: true}
}

// responseBulk is about what env's variable-length fields take in an
// envelope.
func responseBulk(env *Response) int {
	n := len(env.Payload) + len(env.Sealed) + len(env.Message) + metadataBytes(env.Header) + metadataBytes(env.Trailer) +
		len(env.ID) + len(env.Sig)
	for _, d := range env.Details {
		n += len(d)
	}
	return n
}

// metadataBytes is about what md takes in an envelope.
func metadataBytes(md Metadata) int {
	n := 0
	for k, vs := range md {
		n += len(k) + 8
		for _, v := range vs {
			n += len(v) + 4
		}
	}
	return n
}

// release returns w to the pool unless it is a writer of its own or its
// buffer grew too big to keep.
func (w *envelopeWriter) release() {
	if w.owned || cap(w.buf) > maxPooledEnvelope {
		return
	}
	w.buf = w.buf[:0]
	envelopeWriters.Put(w)
}

// result returns what was written: a copy when the buffer goes back to
// the pool, the buffer itself for a writer of its own.
func (w *envelopeWriter) result() ([]byte, error) {
	if w.owned {
		return w.buf, nil
	}
	return bytes.Clone(w.buf), nil
}

// head appends a type code and n as a big-endian number of size bytes
// (0, 1, 2, 4 or 8).
func (w *envelopeWriter) head(code byte, size int, n uint64) {
	w.buf = append(w.buf, code)
	switch size {
	case 1:
		w.buf = append(w.buf, byte(n))
	case 2:
		w.buf = binary.BigEndian.AppendUint16(w.buf, uint16(n))
	case 4:
		w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(n))
	case 8:
		w.buf = binary.BigEndian.AppendUint64(w.buf, n)
	}
}

// length appends the head of a value of n elements or bytes: fix (its
// code ored with n) below fixBelow, else the 8-, 16- or 32-bit form from
// codes, of which a zero code means the form does not exist.
func (w *envelopeWriter) length(n int, fix byte, fixBelow int, codes [3]byte) {
	switch {
	case n < fixBelow:
		w.buf = append(w.buf, fix|byte(n))
	case n <= math.MaxUint8 && codes[0] != 0:
		w.head(codes[0], 1, uint64(n))
	case n <= math.MaxUint16:
		w.head(codes[1], 2, uint64(n))
	default:
		w.head(codes[2], 4, uint64(n))
	}
}

// mapLen starts a map of n entries.
func (w *envelopeWriter) mapLen(n int) {
	w.length(n, codeFixMap, 16, [3]byte{0, codeMap16, codeMap32})
}

// arrayLen starts an array of n elements.
func (w *envelopeWriter) arrayLen(n int) {
	w.length(n, codeFixArray, 16, [3]byte{0, codeArray16, codeArray32})
}

// str appends a string value.
func (w *envelopeWriter) str(s string) {
	w.length(len(s), codeFixStr, 32, [3]byte{codeStr8, codeStr16, codeStr32})
	w.buf = append(w.buf, s...)
}

// key writes a field name.
func (w *envelopeWriter) key(k string) { w.str(k) }

// int writes a Go int field in its shortest form, as msgpack does.
func (w *envelopeWriter) int(k string, n int) {
	w.key(k)
	switch v := int64(n); {
	case v >= 0 && v <= math.MaxInt8, v < 0 && v >= -32:
		w.buf = append(w.buf, byte(v)) // a positive or negative fixint
	case v > 0 && v <= math.MaxUint8:
		w.head(codeUint8, 1, uint64(v))
	case v > 0 && v <= math.MaxUint16:
		w.head(codeUint16, 2, uint64(v))
	case v > 0 && v <= math.MaxUint32:
		w.head(codeUint32, 4, uint64(v))
	case v > 0:
		w.head(codeUint64, 8, uint64(v))
	case v >= math.MinInt8:
		w.head(codeInt8, 1, uint64(v))
	case v >= math.MinInt16:
		w.head(codeInt16, 2, uint64(v))
	case v >= math.MinInt32:
		w.head(codeInt32, 4, uint64(v))
	default:
		w.head(codeInt64, 8, uint64(v))
	}
}

// int64 writes a Go int64 field; msgpack writes it as a nine-byte int64
// whatever its value.
func (w *envelopeWriter) int64(k string, n int64) {
	w.key(k)
	w.head(codeInt64, 8, uint64(n))
}

// uint8 writes a uint8 field; msgpack writes Go uint8 as a two-byte uint8
// whatever its value.
func (w *envelopeWriter) uint8(k string, n uint8) {
	w.key(k)
	w.head(codeUint8, 1, uint64(n))
}

// uint32 writes a uint32 field; msgpack writes Go uint32 as a five-byte
// uint32 whatever its value.
func (w *envelopeWriter) uint32(k string, n uint32) {
	w.key(k)
	w.head(codeUint32, 4, uint64(n))
}

// bool writes a bool field.
func (w *envelopeWriter) bool(k string, b bool) {
	w.key(k)
	if b {
		w.buf = append(w.buf, codeTrue)
	} else {
		w.buf = append(w.buf, codeFalse)
	}
}

// float64 writes a float64 field.
func (w *envelopeWriter) float64(k string, f float64) {
	w.key(k)
	w.head(codeFloat64, 8, math.Float64bits(f))
}

// string writes a string field.
func (w *envelopeWriter) string(k, s string) {
	w.key(k)
	w.str(s)
}

// bin appends a []byte value; a nil slice is msgpack nil.
func (w *envelopeWriter) bin(b []byte) {
	if b == nil {
		w.buf = append(w.buf, codeNil)
		return
	}
	w.length(len(b), codeBin8, 0, [3]byte{codeBin8, codeBin16, codeBin32})
	w.buf = append(w.buf, b...)
}

// bytes writes a []byte field; a nil slice is msgpack nil.
func (w *envelopeWriter) bytes(k string, b []byte) {
	w.key(k)
	w.bin(b)
}

// bytesList writes a [][]byte field as an array of bin values.
func (w *envelopeWriter) bytesList(k string, list [][]byte) {
	w.key(k)
	w.arrayLen(len(list))
	for _, b := range list {
		w.bin(b)
	}
}

// metadata writes a Metadata field: a map of string arrays, in which a nil
// array is msgpack nil.
func (w *envelopeWriter) metadata(k string, md Metadata) {
	w.key(k)
	w.mapLen(len(md))
	for name, values := range md {
		w.str(name)
		if values == nil {
			w.buf = append(w.buf, codeNil)
			continue
		}
		w.arrayLen(len(values))
		for _, v := range values {
			w.str(v)
		}
	}
}

// retryPolicy writes a non-nil *RetryPolicy field as a map of its
// non-empty fields (they are all omitempty).
func (w *envelopeWriter) retryPolicy(k string, p *RetryPolicy) {
	w.key(k)
	w.mapLen(present(p.MaxAttempts != 0, p.InitialBackoff != 0, p.MaxBackoff != 0,
		p.Multiplier != 0, len(p.RetryableCodes) > 0))
	if p.MaxAttempts != 0 {
		w.int("n", p.MaxAttempts)
	}
	if p.InitialBackoff != 0 {
		w.int64("i", p.InitialBackoff)
	}
	if p.MaxBackoff != 0 {
		w.int64("x", p.MaxBackoff)
	}
	if p.Multiplier != 0 {
		w.float64("m", p.Multiplier)
	}
	if len(p.RetryableCodes) > 0 {
		w.key("c")
		w.arrayLen(len(p.RetryableCodes))
		for _, c := range p.RetryableCodes {
			w.head(codeUint32, 4, uint64(c))
		}
	}
}
