package wire

import "errors"

// This file is the envelopes' hand-written msgpack codec. It writes exactly
// what msgpack.Marshal writes for the envelope structs (same keys, same
// order, same omitempty rules, same integer widths) and reads what
// msgpack's strict reflection decoder reads (but for the few inputs
// errNotMap and errOutOfRange describe), without reflection: every call
// encodes and decodes two envelopes, and reflection made that a sixth of
// the CPU a unary call costs. The struct tags stay on the types as the
// reference the tests check the codec against, so a field added there
// must be added here too.

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
	w := newEnvelopeWriter(requestBulk(env))
	defer w.release()
	writeRequest(w, env)
	return w.result()
}

// AppendRequest is EncodeRequest appending to dst, for a caller that
// reuses its buffers: with cap(dst) of at least RequestCap(env) the
// envelope is written into dst's memory and nothing is allocated.
func AppendRequest(dst []byte, env *Request) ([]byte, error) {
	w := newAppendingWriter(dst)
	writeRequest(&w, env)
	return w.result()
}

// RequestCap is a capacity for env's encoding: its variable-length fields
// and a kilobyte for the rest, which only a pathological envelope (say,
// hundreds of retryable codes) outgrows; AppendRequest then grows dst.
func RequestCap(env *Request) int { return requestBulk(env) + envelopeFields }

// requestBulk is about what env's variable-length fields take.
func requestBulk(env *Request) int {
	return len(env.Payload) + len(env.Sealed) + metadataBytes(env.Header) +
		len(env.ID) + len(env.Method) + len(env.ReplyTo) + len(env.Key) + len(env.Caller) + len(env.Sig)
}

// writeRequest writes env's fields.
func writeRequest(w *envelopeWriter, env *Request) {
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
}

// EncodeResponse encodes a response envelope as msgpack.Marshal would,
// without reflection.
func EncodeResponse(env *Response) ([]byte, error) {
	w := newEnvelopeWriter(responseBulk(env))
	defer w.release()
	writeResponse(w, env)
	return w.result()
}

// AppendResponse is EncodeResponse appending to dst, for a caller that
// reuses its buffers: with cap(dst) of at least ResponseCap(env) the
// envelope is written into dst's memory and nothing is allocated.
func AppendResponse(dst []byte, env *Response) ([]byte, error) {
	w := newAppendingWriter(dst)
	writeResponse(&w, env)
	return w.result()
}

// ResponseCap is a capacity for env's encoding: its variable-length
// fields and a kilobyte for the rest (see RequestCap).
func ResponseCap(env *Response) int { return responseBulk(env) + envelopeFields }

// writeResponse writes env's fields.
func writeResponse(w *envelopeWriter, env *Response) {
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
func decodeRequestFields(b []byte, share sharing, env *Request) error {
	return decodeEnvelope(b, share, func(r *envelopeReader) error {
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
				env.Payload, err = r.payload()
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
func decodeResponseFields(b []byte, share sharing, env *Response) error {
	return decodeEnvelope(b, share, func(r *envelopeReader) error {
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
				env.Payload, err = r.payload()
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
