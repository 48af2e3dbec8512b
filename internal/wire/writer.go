package wire

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// The codec's writing half: a pooled encoder that writes an envelope field
// by field (see EncodeRequest).

// maxPooledEnvelope caps the buffers kept for reuse, so that one huge
// payload does not pin its memory in the pool.
const maxPooledEnvelope = 64 << 10

// envelopeWriter writes one envelope with a pooled msgpack.Encoder. The
// first error sticks and is returned by result, so that the field-by-field
// code of EncodeRequest and EncodeResponse reads as the wire format it
// writes.
type envelopeWriter struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
	err error
	// owned: the writer is not from the pool (newEnvelopeWriter) and its
	// buffer is the result.
	owned bool
	// appending: the writer is from appendingWriters, its buffer the
	// caller's (newAppendingWriter).
	appending bool
}

// envelopeWriters holds writers whose encoder is bound to their buffer for
// good.
var envelopeWriters = sync.Pool{New: func() any {
	w := new(envelopeWriter)
	w.enc = msgpack.NewEncoder(&w.buf)
	return w
}}

// appendingWriters holds writers for AppendRequest and AppendResponse,
// whose buffer is the caller's for each envelope.
var appendingWriters = sync.Pool{New: func() any {
	w := &envelopeWriter{appending: true}
	w.enc = msgpack.NewEncoder(&w.buf)
	return w
}}

// newAppendingWriter returns a writer that appends to dst.
func newAppendingWriter(dst []byte) *envelopeWriter {
	w := appendingWriters.Get().(*envelopeWriter)
	w.buf = *bytes.NewBuffer(dst)
	return w
}

// appended returns dst with the envelope appended, and lets go of it.
func (w *envelopeWriter) appended() ([]byte, error) {
	out := w.buf.Bytes()
	w.buf = bytes.Buffer{}
	if w.err != nil {
		return nil, fmt.Errorf("rpr: encode envelope: %w", w.err)
	}
	return out, nil
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
	w := &envelopeWriter{owned: true}
	w.buf.Grow(bulk + envelopeFields)
	w.enc = msgpack.NewEncoder(&w.buf)
	return w
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
	if w.appending {
		w.buf = bytes.Buffer{} // the caller's, even after a failure
		w.err = nil
		appendingWriters.Put(w)
		return
	}
	if w.owned || w.buf.Cap() > maxPooledEnvelope {
		return
	}
	w.buf.Reset()
	w.err = nil
	envelopeWriters.Put(w)
}

// result returns what was written: a copy when the buffer goes back to
// the pool, the buffer itself for a writer of its own.
func (w *envelopeWriter) result() ([]byte, error) {
	if w.err != nil {
		return nil, fmt.Errorf("rpr: encode envelope: %w", w.err)
	}
	if w.owned {
		return w.buf.Bytes(), nil
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
