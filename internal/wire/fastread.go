package wire

import (
	"encoding/binary"
	"io"
)

// Fast paths of envelopeReader for the headers nearly every field has: a
// map's, a str's or bin's, an integer's. They read straight from the
// input instead of through the msgpack.Decoder, whose every byte comes
// through an io.ByteReader call: that was most of the cost of decoding an
// envelope, a twentieth of a server's CPU per unary call. Each reports
// whether it read the value; for any other code, and for a header the
// input ends inside, it reads nothing, and bytesLen, mapLen, int64 and
// uint64 (which the envelope's fields are read through) ask the decoder,
// whose answer (or error) is then the same as it always was.

// bytesLen reads a str or bin header: the length of the value that
// follows, or -1 for nil.
func (r *envelopeReader) bytesLen() (int, error) {
	if n, ok := r.fastBytesLen(); ok {
		return n, nil
	}
	return r.dec.DecodeBytesLen()
}

// mapLen reads a map header: its number of entries, or -1 for nil.
func (r *envelopeReader) mapLen() (int, error) {
	if n, ok := r.fastMapLen(); ok {
		return n, nil
	}
	return r.dec.DecodeMapLen()
}

// int64 reads any integer, or nil as 0, as Decoder.DecodeInt64 does.
func (r *envelopeReader) int64() (int64, error) {
	if n, ok := r.fastInt(); ok {
		return n, nil
	}
	return r.dec.DecodeInt64()
}

// uint64 reads any integer, or nil as 0, as Decoder.DecodeUint64 does (a
// negative one converted as Go converts it).
func (r *envelopeReader) uint64() (uint64, error) {
	if n, ok := r.fastInt(); ok {
		return uint64(n), nil
	}
	return r.dec.DecodeUint64()
}

// next returns the unread input.
func (r *envelopeReader) next() []byte { return r.in[len(r.in)-r.src.Len():] }

// advance moves past n bytes of the input, all of them there.
func (r *envelopeReader) advance(n int) {
	r.src.Seek(int64(n), io.SeekCurrent) // cannot fail: n bytes are left
}

// fastMapLen reads a map header: its number of entries, or -1 for nil.
// Each entry takes at least two bytes: a key and a value.
func (r *envelopeReader) fastMapLen() (int, bool) { return r.fastLen(0x80, 0xde, 2) }

// fastArrayLen reads an array header: its number of elements, or -1 for
// nil. Each element takes at least a byte.
func (r *envelopeReader) fastArrayLen() (int, bool) { return r.fastLen(0x90, 0xdc, 1) }

// fastLen reads the header of a map or an array whose fix form starts at
// code fix and whose 16-bit form is code16, each item of which takes at
// least per bytes. A 32-bit form, and a length the input cannot hold, are
// left to the decoder (which says the input is truncated).
func (r *envelopeReader) fastLen(fix, code16 byte, per int) (int, bool) {
	b := r.next()
	if len(b) == 0 {
		return 0, false
	}
	var n, size int
	switch c := b[0]; {
	case c >= fix && c <= fix+0x0f:
		n, size = int(c&0x0f), 1
	case c == 0xc0: // nil
		n, size = -1, 1
	case c == code16 && len(b) >= 3:
		n, size = int(binary.BigEndian.Uint16(b[1:])), 3
	default:
		return 0, false
	}
	if n > (len(b)-size)/per {
		return 0, false
	}
	r.advance(size)
	return n, true
}

// fastBytesLen reads a str or bin header: the length of the value that
// follows, or -1 for nil.
func (r *envelopeReader) fastBytesLen() (int, bool) {
	b := r.next()
	if len(b) == 0 {
		return 0, false
	}
	var n, size int
	switch c := b[0]; {
	case c >= 0xa0 && c <= 0xbf: // fixstr
		n, size = int(c&0x1f), 1
	case c == 0xc0: // nil
		n, size = -1, 1
	case (c == 0xd9 || c == 0xc4) && len(b) >= 2: // str 8, bin 8
		n, size = int(b[1]), 2
	case (c == 0xda || c == 0xc5) && len(b) >= 3: // str 16, bin 16
		n, size = int(binary.BigEndian.Uint16(b[1:])), 3
	case (c == 0xdb || c == 0xc6) && len(b) >= 5: // str 32, bin 32
		n, size = int(binary.BigEndian.Uint32(b[1:])), 5
	default:
		return 0, false
	}
	r.advance(size)
	return n, true
}

// fastInt reads an integer of any width, or nil as 0, as the decoder's
// DecodeInt64 converts it (a uint 64 above the int64 range wraps).
func (r *envelopeReader) fastInt() (int64, bool) {
	b := r.next()
	if len(b) == 0 {
		return 0, false
	}
	c := b[0]
	if c <= 0x7f || c >= 0xe0 { // positive and negative fixint
		r.advance(1)
		return int64(int8(c)), true
	}
	var n int64
	var size int
	switch {
	case c == 0xc0: // nil
		n, size = 0, 1
	case c == 0xcc && len(b) >= 2:
		n, size = int64(b[1]), 2
	case c == 0xd0 && len(b) >= 2:
		n, size = int64(int8(b[1])), 2
	case c == 0xcd && len(b) >= 3:
		n, size = int64(binary.BigEndian.Uint16(b[1:])), 3
	case c == 0xd1 && len(b) >= 3:
		n, size = int64(int16(binary.BigEndian.Uint16(b[1:]))), 3
	case c == 0xce && len(b) >= 5:
		n, size = int64(binary.BigEndian.Uint32(b[1:])), 5
	case c == 0xd2 && len(b) >= 5:
		n, size = int64(int32(binary.BigEndian.Uint32(b[1:]))), 5
	case (c == 0xcf || c == 0xd3) && len(b) >= 9:
		n, size = int64(binary.BigEndian.Uint64(b[1:])), 9
	default:
		return 0, false
	}
	r.advance(size)
	return n, true
}
