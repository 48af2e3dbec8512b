package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The codec's reading half: a pooled decoder that reads an envelope field
// by field and checks every length against what is left.

// envelopeReader reads one envelope: a msgpack.Decoder reads the headers
// and the numbers from src, and the bytes of a str or bin value are sliced
// from in, which saves the decoder's copy and lets every length be checked
// against what is left before anything is allocated for it. This is sound
// because a decoder over an io.ByteScanner such as *bytes.Reader buffers
// nothing: src's position is always the decoder's.
type envelopeReader struct {
	in  []byte
	src envelopeSource // reads in
	dec *msgpack.Decoder
	// share says which values are cut from in instead of copied.
	share sharing
}

// sharing says which values of an envelope share the memory it is
// decoded from instead of being copied out of it.
type sharing uint8

const (
	// shareNothing copies every value: the memory may change.
	shareNothing sharing = iota
	// shareAll cuts strings and the payload from the memory: the bytes of
	// a string, which never change.
	shareAll
	// sharePayload cuts only the payload from the memory and copies
	// everything else: a buffer its owner reuses once the payload has
	// been read, which must not take strings the caller keeps with it.
	sharePayload
)

// envelopeReaders holds readers whose decoder is bound to their src for
// good: pointing src at the next envelope is all a reader needs.
var envelopeReaders = sync.Pool{New: func() any {
	r := new(envelopeReader)
	r.dec = msgpack.NewDecoder(&r.src)
	return r
}}

// readEnvelope runs read over b with a pooled reader.
func readEnvelope(b []byte, share sharing, read func(r *envelopeReader) error) error {
	r := envelopeReaders.Get().(*envelopeReader)
	r.in, r.share = b, share
	r.src.Reset(b)
	err := read(r)
	r.in, r.share = nil, shareNothing
	r.src.Reset(nil)
	envelopeReaders.Put(r)
	return err
}

// decodeEnvelope runs decode over b with a pooled reader and refuses bytes
// left over after it.
func decodeEnvelope(b []byte, share sharing, decode func(r *envelopeReader) error) error {
	if len(b) == 0 {
		return errors.New("empty")
	}
	return readEnvelope(b, share, func(r *envelopeReader) error {
		if err := decode(r); err != nil {
			return err
		}
		if n := r.src.Len(); n > 0 {
			return fmt.Errorf("%d trailing bytes after the envelope", n)
		}
		return nil
	})
}

// scanEnvelope reads the map at the start of b leniently, for peekVersion
// and PeekReplyAddress: field decodes the values it wants and skips the
// rest, and bytes after the map are ignored, as msgpack.Unmarshal ignores
// them. Unlike msgpack.Unmarshal it allocates nothing for a length the
// input cannot hold (the library's pooled decoders keep such buffers, so
// a stream of bad envelopes grew them without bound) and it bounds how
// deep it follows nested values.
func scanEnvelope(b []byte, field func(r *envelopeReader, key []byte) error) error {
	return readEnvelope(b, shareNothing, func(r *envelopeReader) error {
		return r.fields(func(key []byte) error { return field(r, key) })
	})
}

// fields reads a map of named fields and hands each key to field, which
// decodes the value that follows; switch string(key) allocates nothing. A
// msgpack nil reads as a map without fields, as the reflection decoder
// reads it.
func (r *envelopeReader) fields(field func(key []byte) error) error {
	n, err := r.structLen()
	if err != nil {
		return err
	}
	for range n {
		key, err := r.raw()
		if err != nil {
			return fmt.Errorf("field name: %w", err)
		}
		if err := field(key); err != nil {
			if err == errUnknownField {
				return fmt.Errorf("unknown field %q", key)
			}
			return fmt.Errorf("field %q: %w", key, err)
		}
	}
	return nil
}

// structLen reads the header of a map that holds a struct: its number of
// entries, or -1 for nil. Unlike Decoder.DecodeMapLen it refuses an
// extension header in front, as the reflection decoder does for structs.
func (r *envelopeReader) structLen() (int, error) {
	if n, ok := r.fastMapLen(); ok {
		return n, nil
	}
	c, err := r.dec.PeekCode()
	if err != nil {
		return 0, err
	}
	if c != msgpcode.Nil && !msgpcode.IsFixedMap(c) && c != msgpcode.Map16 && c != msgpcode.Map32 {
		return 0, fmt.Errorf("%w (code 0x%02x)", errNotMap, c)
	}
	n, err := r.dec.DecodeMapLen()
	if err != nil {
		return 0, err
	}
	// Each entry takes at least two bytes: a key and a value.
	if n > r.src.Len()/2 {
		return 0, fmt.Errorf("map of %d entries: %w", n, errTruncated)
	}
	return n, nil
}

// raw reads a str or bin value (the reflection decoder takes either for a
// string or a []byte) and returns its bytes as a slice of the input, or nil
// for msgpack nil.
func (r *envelopeReader) raw() ([]byte, error) {
	n, err := r.bytesLen()
	if err != nil || n < 0 {
		return nil, err
	}
	left := r.src.Len()
	if n > left {
		return nil, fmt.Errorf("%d bytes: %w", n, errTruncated)
	}
	start := len(r.in) - left
	r.src.Seek(int64(n), io.SeekCurrent) // cannot fail: n bytes are left
	return r.in[start : start+n : start+n], nil
}

// maxSkipDepth bounds the nesting skip follows, so that a deeply nested
// value cannot exhaust the stack; an envelope nests three levels deep.
const maxSkipDepth = 16

// skip reads past one value of any type, checking every length against
// the input before it moves on.
func (r *envelopeReader) skip() error { return r.skipNested(maxSkipDepth) }

// skipNested is skip with the levels of nesting it may still follow.
func (r *envelopeReader) skipNested(depth int) error {
	if depth == 0 {
		return errTooDeep
	}
	c, err := r.dec.PeekCode()
	if err != nil {
		return err
	}
	n := 0
	switch {
	case msgpcode.IsString(c) || msgpcode.IsBin(c):
		_, err = r.raw()
		return err
	case msgpcode.IsExt(c):
		if _, n, err = r.dec.DecodeExtHeader(); err != nil {
			return err
		}
		if n > r.src.Len() {
			return fmt.Errorf("extension of %d bytes: %w", n, errTruncated)
		}
		r.src.Seek(int64(n), io.SeekCurrent) // cannot fail: n bytes are left
		return nil
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err = r.arrayLen()
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err = r.structLen()
		n *= 2 // a key and a value per entry
	default:
		return r.dec.Skip() // nil, a bool or a number: a few bytes at most
	}
	for ; err == nil && n > 0; n-- {
		err = r.skipNested(depth - 1)
	}
	return err
}

// decodeInt reads any msgpack integer (or nil, as 0) into a signed field,
// refusing values that do not fit.
func decodeInt[T ~int | ~int64](r *envelopeReader) (T, error) {
	n, err := r.int64()
	if err != nil {
		return 0, err
	}
	if int64(T(n)) != n {
		return 0, fmt.Errorf("%d: %w", n, errOutOfRange)
	}
	return T(n), nil
}

// decodeUint reads any msgpack integer (or nil, as 0) into an unsigned
// field, refusing values that do not fit, negative ones included.
func decodeUint[T ~uint8 | ~uint32](r *envelopeReader) (T, error) {
	n, err := r.uint64()
	if err != nil {
		return 0, err
	}
	if uint64(T(n)) != n {
		return 0, fmt.Errorf("%d: %w", int64(n), errOutOfRange)
	}
	return T(n), nil
}

// string reads a str or bin value; nil reads as "".
func (r *envelopeReader) string() (string, error) {
	b, err := r.raw()
	if r.share == shareAll && len(b) > 0 {
		return unsafe.String(&b[0], len(b)), err // shares the input string's memory
	}
	return string(b), err
}

// bytes reads a bin or str value into a new slice: nil stays nil and an
// empty value is an empty, non-nil slice, as with the reflection decoder.
func (r *envelopeReader) bytes() ([]byte, error) {
	b, err := r.raw()
	return bytes.Clone(b), err
}

// payload reads a payload: as bytes does, unless it may share in's
// memory (shareAll, sharePayload), since a payload is only ever read
// (unmarshalled, verified, encoded again). For a large message that is
// one copy fewer on each side of a call.
func (r *envelopeReader) payload() ([]byte, error) {
	if r.share == shareNothing {
		return r.bytes()
	}
	return r.raw() // capped at its length: an append cannot write into the string
}

// arrayLen reads an array header: its length, or -1 for nil.
func (r *envelopeReader) arrayLen() (int, error) {
	if n, ok := r.fastArrayLen(); ok {
		return n, nil
	}
	n, err := r.dec.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	// Each element takes at least a byte.
	if n > r.src.Len() {
		return 0, fmt.Errorf("array of %d elements: %w", n, errTruncated)
	}
	return n, nil
}

// bytesList reads an array of bin values; nil stays nil.
func (r *envelopeReader) bytesList() ([][]byte, error) {
	n, err := r.arrayLen()
	if err != nil || n < 0 {
		return nil, err
	}
	list := make([][]byte, n)
	for i := range list {
		if list[i], err = r.bytes(); err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
	}
	return list, nil
}

// metadata reads a map of string arrays into *md. Like the reflection
// decoder, it sets *md to nil for msgpack nil and adds to a map already
// there, so that a repeated key merges; a nil array stays nil.
func (r *envelopeReader) metadata(md *Metadata) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	if n < 0 {
		*md = nil
		return nil
	}
	if n > r.src.Len()/2 {
		return fmt.Errorf("map of %d entries: %w", n, errTruncated)
	}
	if *md == nil {
		*md = make(Metadata, n)
	}
	for range n {
		name, err := r.string()
		if err != nil {
			return fmt.Errorf("key: %w", err)
		}
		values, err := r.strings()
		if err != nil {
			return fmt.Errorf("%q: %w", name, err)
		}
		(*md)[name] = values
	}
	return nil
}

// strings reads an array of strings; nil stays nil.
func (r *envelopeReader) strings() ([]string, error) {
	n, err := r.arrayLen()
	if err != nil || n < 0 {
		return nil, err
	}
	values := make([]string, n)
	for i := range values {
		if values[i], err = r.string(); err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
	}
	return values, nil
}

// retryPolicy reads a retry policy into *p: nil sets it to nil, and a map
// fills the policy already there or a new one, as the reflection decoder
// does for a pointer to a struct.
func (r *envelopeReader) retryPolicy(p **RetryPolicy) error {
	c, err := r.dec.PeekCode()
	if err != nil {
		return err
	}
	if c == msgpcode.Nil {
		*p = nil
		return r.dec.DecodeNil()
	}
	if *p == nil {
		*p = new(RetryPolicy)
	}
	policy := *p
	return r.fields(func(key []byte) (err error) {
		switch string(key) {
		case "n":
			policy.MaxAttempts, err = decodeInt[int](r)
		case "i":
			policy.InitialBackoff, err = decodeInt[int64](r)
		case "x":
			policy.MaxBackoff, err = decodeInt[int64](r)
		case "m":
			policy.Multiplier, err = r.dec.DecodeFloat64()
		case "c":
			policy.RetryableCodes, err = r.codes()
		default:
			err = errUnknownField
		}
		return err
	})
}

// codes reads an array of status codes; nil stays nil.
func (r *envelopeReader) codes() ([]uint32, error) {
	n, err := r.arrayLen()
	if err != nil || n < 0 {
		return nil, err
	}
	codes := make([]uint32, n)
	for i := range codes {
		if codes[i], err = decodeUint[uint32](r); err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
	}
	return codes, nil
}
