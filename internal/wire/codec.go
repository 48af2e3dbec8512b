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

// This file is the envelopes' hand-written msgpack codec. It writes exactly
// what msgpack.Marshal writes for the envelope structs (same keys, same
// order, same omitempty rules, same integer widths) and reads what
// msgpack's strict reflection decoder reads (but for the few inputs
// errNotMap and errOutOfRange describe), without reflection: every call
// encodes and decodes two envelopes, and reflection made that a sixth of
// the CPU a unary call costs. The struct tags stay on the types as the
// reference the tests check the codec against, so a field added there
// must be added here too.

// maxPooledEnvelope caps the buffers kept for reuse, so that one huge
// payload does not pin its memory in the pool.
const maxPooledEnvelope = 64 << 10

// errTruncated reports a length that claims more bytes than the envelope
// has left: such input is refused before anything is allocated for it.
var errTruncated = errors.New("length exceeds the bytes left in the envelope")

// errNotMap reports an envelope, or a nested struct, that is not a msgpack
// map. (The reflection decoder also took an array of every field in
// declaration order, which rpr never wrote.)
var errNotMap = errors.New("not a msgpack map")

// errOutOfRange reports an integer too large for its field. (The reflection
// decoder truncated it silently.)
var errOutOfRange = errors.New("integer out of range")

// errTooDeep reports a value nested deeper than any envelope nests, which
// skip refuses to follow.
var errTooDeep = errors.New("values nested too deep")

// errUnknownField is what a field decoder returns for a key it does not
// know; fields turns it into a message that names the key.
var errUnknownField = errors.New("unknown field")

// EncodeRequest encodes a request envelope as msgpack.Marshal would,
// without reflection.
func EncodeRequest(env *Request) ([]byte, error) {
	w := newEnvelopeWriter()
	defer w.release()
	// v, id, m, t, a and k are always written, and p unless sealed; the
	// rest are omitempty. A sealed request carries its header and payload
	// only in Sealed.
	sealed := env.Sealed != nil
	w.mapLen(6 + present(!sealed, env.Deadline != 0, len(env.Header) > 0 && !sealed, env.ReplyTo != "",
		env.Key != "", env.Retry != nil, env.Timeout != 0, env.Replays != 0,
		env.Streams != 0, env.Window != 0, env.WindowBytes != 0, env.StreamDeadline != 0,
		env.Messages != 0, env.Closed, env.Caller != "", sealed, env.Sig != nil))
	w.int("v", env.Version)
	w.string("id", env.ID)
	w.string("m", env.Method)
	if env.Deadline != 0 {
		w.int64("dl", env.Deadline)
	}
	if len(env.Header) > 0 && !sealed {
		w.metadata("h", env.Header)
	}
	if env.ReplyTo != "" {
		w.string("r", env.ReplyTo)
	}
	w.int64("t", env.Enqueued)
	w.int("a", env.Attempt)
	w.uint8("k", uint8(env.Kind))
	if !sealed {
		w.bytes("p", env.Payload)
	}
	if env.Key != "" {
		w.string("ik", env.Key)
	}
	if env.Retry != nil {
		w.retryPolicy("rp", env.Retry)
	}
	if env.Timeout != 0 {
		w.int64("to", env.Timeout)
	}
	if env.Replays != 0 {
		w.int("rr", env.Replays)
	}
	if env.Streams != 0 {
		w.uint8("sk", env.Streams)
	}
	if env.Window != 0 {
		w.int("sw", env.Window)
	}
	if env.WindowBytes != 0 {
		w.int64("sb", env.WindowBytes)
	}
	if env.StreamDeadline != 0 {
		w.int64("sd", env.StreamDeadline)
	}
	if env.Messages != 0 {
		w.int("sn", env.Messages)
	}
	if env.Closed {
		w.bool("sc", env.Closed)
	}
	if env.Caller != "" {
		w.string("ca", env.Caller)
	}
	if sealed {
		w.bytes("sx", env.Sealed)
	}
	if env.Sig != nil {
		w.bytes("sg", env.Sig)
	}
	return w.result()
}

// EncodeResponse encodes a response envelope as msgpack.Marshal would,
// without reflection.
func EncodeResponse(env *Response) ([]byte, error) {
	w := newEnvelopeWriter()
	defer w.release()
	// v, id and c are always written; the rest are omitempty. A sealed
	// response carries everything else only in Sealed.
	clear := env.Sealed == nil
	w.mapLen(3 + present(env.Message != "" && clear, len(env.Details) > 0 && clear, len(env.Header) > 0 && clear,
		len(env.Trailer) > 0 && clear, len(env.Payload) > 0 && clear, env.Refused && clear, !clear, env.Sig != nil))
	w.int("v", env.Version)
	w.string("id", env.ID)
	w.uint32("c", uint32(env.Code))
	if clear {
		writeResponseBody(w, env)
	} else {
		w.bytes("sx", env.Sealed)
	}
	if env.Sig != nil {
		w.bytes("sg", env.Sig)
	}
	return w.result()
}

// writeResponseBody writes the fields of a response that sealing hides:
// all but v, id and c.
func writeResponseBody(w *envelopeWriter, env *Response) {
	if env.Message != "" {
		w.string("msg", env.Message)
	}
	if len(env.Details) > 0 {
		w.bytesList("x", env.Details)
	}
	if len(env.Header) > 0 {
		w.metadata("h", env.Header)
	}
	if len(env.Trailer) > 0 {
		w.metadata("tr", env.Trailer)
	}
	if len(env.Payload) > 0 {
		w.bytes("p", env.Payload)
	}
	if env.Refused {
		w.bool("rf", env.Refused)
	}
}

// decodeRequestFields decodes b into env, refusing unknown keys, values of
// the wrong type and trailing bytes; DecodeRequest validates the result.
func decodeRequestFields(b []byte, frozen bool, env *Request) error {
	return decodeEnvelope(b, frozen, func(r *envelopeReader) error {
		return r.fields(func(key []byte) (err error) {
			switch string(key) {
			case "v":
				env.Version, err = decodeInt[int](r)
			case "id":
				env.ID, err = r.string()
			case "m":
				env.Method, err = r.string()
			case "dl":
				env.Deadline, err = decodeInt[int64](r)
			case "h":
				err = r.metadata(&env.Header)
			case "r":
				env.ReplyTo, err = r.string()
			case "t":
				env.Enqueued, err = decodeInt[int64](r)
			case "a":
				env.Attempt, err = decodeInt[int](r)
			case "k":
				env.Kind, err = decodeUint[Kind](r)
			case "p":
				env.Payload, err = r.bytes()
			case "ik":
				env.Key, err = r.string()
			case "rp":
				err = r.retryPolicy(&env.Retry)
			case "to":
				env.Timeout, err = decodeInt[int64](r)
			case "rr":
				env.Replays, err = decodeInt[int](r)
			case "sk":
				env.Streams, err = decodeUint[uint8](r)
			case "sw":
				env.Window, err = decodeInt[int](r)
			case "sb":
				env.WindowBytes, err = decodeInt[int64](r)
			case "sd":
				env.StreamDeadline, err = decodeInt[int64](r)
			case "sn":
				env.Messages, err = decodeInt[int](r)
			case "sc":
				env.Closed, err = r.dec.DecodeBool()
			case "ca":
				env.Caller, err = r.string()
			case "sx":
				env.Sealed, err = r.bytes()
			case "sg":
				env.Sig, err = r.bytes()
			default:
				err = errUnknownField
			}
			return err
		})
	})
}

// decodeResponseFields decodes b into env, refusing unknown keys, values of
// the wrong type and trailing bytes; DecodeResponse validates the result.
func decodeResponseFields(b []byte, frozen bool, env *Response) error {
	return decodeEnvelope(b, frozen, func(r *envelopeReader) error {
		return r.fields(func(key []byte) (err error) {
			switch string(key) {
			case "v":
				env.Version, err = decodeInt[int](r)
			case "id":
				env.ID, err = r.string()
			case "c":
				env.Code, err = decodeUint[uint32](r)
			case "msg":
				env.Message, err = r.string()
			case "x":
				env.Details, err = r.bytesList()
			case "h":
				err = r.metadata(&env.Header)
			case "tr":
				err = r.metadata(&env.Trailer)
			case "p":
				env.Payload, err = r.bytes()
			case "rf":
				env.Refused, err = r.dec.DecodeBool()
			case "sx":
				env.Sealed, err = r.bytes()
			case "sg":
				env.Sig, err = r.bytes()
			default:
				err = errUnknownField
			}
			return err
		})
	})
}

// present counts the true conditions, which are the omitempty fields an
// encoder is about to write.
func present(conds ...bool) int {
	n := 0
	for _, c := range conds {
		if c {
			n++
		}
	}
	return n
}

// envelopeWriter writes one envelope with a pooled msgpack.Encoder. The
// first error sticks and is returned by result, so that the field-by-field
// code above reads as the wire format it writes.
type envelopeWriter struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
	err error
}

// envelopeWriters holds writers whose encoder is bound to their buffer for
// good.
var envelopeWriters = sync.Pool{New: func() any {
	w := new(envelopeWriter)
	w.enc = msgpack.NewEncoder(&w.buf)
	return w
}}

// newEnvelopeWriter takes an empty writer from the pool.
func newEnvelopeWriter() *envelopeWriter {
	return envelopeWriters.Get().(*envelopeWriter)
}

// release returns w to the pool unless its buffer grew too big to keep.
func (w *envelopeWriter) release() {
	if w.buf.Cap() > maxPooledEnvelope {
		return
	}
	w.buf.Reset()
	w.err = nil
	envelopeWriters.Put(w)
}

// result returns a copy of what was written, since the buffer goes back to
// the pool.
func (w *envelopeWriter) result() ([]byte, error) {
	if w.err != nil {
		return nil, fmt.Errorf("rpr: encode envelope: %w", w.err)
	}
	return bytes.Clone(w.buf.Bytes()), nil
}

// do runs one encoder step unless an earlier one failed.
func (w *envelopeWriter) do(step func(*msgpack.Encoder) error) {
	if w.err == nil {
		w.err = step(w.enc)
	}
}

// mapLen starts a map of n entries.
func (w *envelopeWriter) mapLen(n int) {
	if w.err == nil {
		w.err = w.enc.EncodeMapLen(n)
	}
}

// key writes a field name.
func (w *envelopeWriter) key(k string) {
	if w.err == nil {
		w.err = w.enc.EncodeString(k)
	}
}

// int writes a Go int field in its shortest form, as msgpack does.
func (w *envelopeWriter) int(k string, n int) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeInt(int64(n))
	}
}

// int64 writes a Go int64 field; msgpack writes it as a nine-byte int64
// whatever its value.
func (w *envelopeWriter) int64(k string, n int64) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeInt64(n)
	}
}

// uint8 writes a uint8 field; msgpack writes Go uint8 as a two-byte uint8
// whatever its value.
func (w *envelopeWriter) uint8(k string, n uint8) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeUint8(n)
	}
}

// uint32 writes a uint32 field; msgpack writes Go uint32 as a five-byte
// uint32 whatever its value.
func (w *envelopeWriter) uint32(k string, n uint32) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeUint32(n)
	}
}

// bool writes a bool field.
func (w *envelopeWriter) bool(k string, b bool) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeBool(b)
	}
}

// float64 writes a float64 field.
func (w *envelopeWriter) float64(k string, f float64) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeFloat64(f)
	}
}

// string writes a string field.
func (w *envelopeWriter) string(k, s string) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeString(s)
	}
}

// bytes writes a []byte field; a nil slice is msgpack nil.
func (w *envelopeWriter) bytes(k string, b []byte) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeBytes(b)
	}
}

// bytesList writes a [][]byte field as an array of bin values.
func (w *envelopeWriter) bytesList(k string, list [][]byte) {
	w.key(k)
	w.do(func(e *msgpack.Encoder) error {
		if err := e.EncodeArrayLen(len(list)); err != nil {
			return err
		}
		for _, b := range list {
			if err := e.EncodeBytes(b); err != nil {
				return err
			}
		}
		return nil
	})
}

// metadata writes a Metadata field: a map of string arrays, in which a nil
// array is msgpack nil.
func (w *envelopeWriter) metadata(k string, md Metadata) {
	w.key(k)
	w.do(func(e *msgpack.Encoder) error {
		if err := e.EncodeMapLen(len(md)); err != nil {
			return err
		}
		for name, values := range md {
			if err := e.EncodeString(name); err != nil {
				return err
			}
			if values == nil {
				if err := e.EncodeNil(); err != nil {
					return err
				}
				continue
			}
			if err := e.EncodeArrayLen(len(values)); err != nil {
				return err
			}
			for _, v := range values {
				if err := e.EncodeString(v); err != nil {
					return err
				}
			}
		}
		return nil
	})
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
		w.do(func(e *msgpack.Encoder) error {
			if err := e.EncodeArrayLen(len(p.RetryableCodes)); err != nil {
				return err
			}
			for _, c := range p.RetryableCodes {
				if err := e.EncodeUint32(uint32(c)); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

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
	// frozen says in is the bytes of a string, which never change: string
	// values are then cut from it without a copy.
	frozen bool
}

// envelopeReaders holds readers whose decoder is bound to their src for
// good: pointing src at the next envelope is all a reader needs.
var envelopeReaders = sync.Pool{New: func() any {
	r := new(envelopeReader)
	r.dec = msgpack.NewDecoder(&r.src)
	return r
}}

// readEnvelope runs read over b with a pooled reader.
func readEnvelope(b []byte, frozen bool, read func(r *envelopeReader) error) error {
	r := envelopeReaders.Get().(*envelopeReader)
	r.in, r.frozen = b, frozen
	r.src.Reset(b)
	err := read(r)
	r.in, r.frozen = nil, false
	r.src.Reset(nil)
	envelopeReaders.Put(r)
	return err
}

// decodeEnvelope runs decode over b with a pooled reader and refuses bytes
// left over after it.
func decodeEnvelope(b []byte, frozen bool, decode func(r *envelopeReader) error) error {
	if len(b) == 0 {
		return errors.New("empty")
	}
	return readEnvelope(b, frozen, func(r *envelopeReader) error {
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
	return readEnvelope(b, false, func(r *envelopeReader) error {
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
	n, err := r.dec.DecodeBytesLen()
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
	n, err := r.dec.DecodeInt64()
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
	n, err := r.dec.DecodeUint64()
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
	if r.frozen && len(b) > 0 {
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

// arrayLen reads an array header: its length, or -1 for nil.
func (r *envelopeReader) arrayLen() (int, error) {
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
	n, err := r.dec.DecodeMapLen()
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
