package tunnel

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// envelopeVersion is the wire version this runtime writes and reads. A
// change to the envelope's meaning gets a new version; decoders refuse
// versions they do not know rather than guess.
const envelopeVersion = 1

// envelopeField is the one stream field that holds an envelope.
const envelopeField = "e"

// callKind says how the caller waits for the outcome.
type callKind uint8

const (
	kindUnary callKind = 1 // the caller waits for a response
	kindAsync callKind = 2 // fire and forget: servers retry, then dead-letter
)

// requestEnvelope is what a client writes to a request stream. Field names
// are short because every call carries them.
type requestEnvelope struct {
	Version int    `msgpack:"v"`
	ID      string `msgpack:"id"`
	// Method is "service/method".
	Method string `msgpack:"m"`
	// Deadline is unix milliseconds on Redis's clock (see redisClock). An
	// async request has none: it waits in the queue as long as it must.
	Deadline int64    `msgpack:"dl,omitempty"`
	Header   Metadata `msgpack:"h,omitempty"`
	// ReplyTo is the caller's response stream (unary calls only).
	ReplyTo string `msgpack:"r,omitempty"`
	// Enqueued is unix milliseconds on Redis's clock when the call was sent.
	Enqueued int64    `msgpack:"t"`
	Attempt  int      `msgpack:"a"`
	Kind     callKind `msgpack:"k"`
	Payload  []byte   `msgpack:"p"`

	// The fields below are for async requests only.

	// Key is the idempotency key: at most one request per key succeeds
	// within the servers' IdempotencyWindow. It names the state hash. On
	// the wire it is left out when it is the request id (the default), and
	// decodeRequest fills it in.
	Key string `msgpack:"ik,omitempty"`
	// Retry is the caller's retry policy; nil means the method's.
	Retry *wireRetryPolicy `msgpack:"rp,omitempty"`
	// Timeout bounds each attempt's handler, in milliseconds; 0 means the
	// method's.
	Timeout int64 `msgpack:"to,omitempty"`
	// Replays counts how often an operator replayed the request from the
	// dead-letter stream (Attempt starts again at 1 on each replay).
	Replays int `msgpack:"rr,omitempty"`
}

// wireRetryPolicy is a RetryPolicy as an async request carries it, so that
// the servers retry it the way its caller asked.
type wireRetryPolicy struct {
	MaxAttempts    int     `msgpack:"n,omitempty"`
	InitialBackoff int64   `msgpack:"i,omitempty"` // milliseconds
	MaxBackoff     int64   `msgpack:"x,omitempty"` // milliseconds
	Multiplier     float64 `msgpack:"m,omitempty"`
	RetryableCodes []Code  `msgpack:"c,omitempty"`
}

// responseEnvelope is what a server writes to a caller's response stream.
type responseEnvelope struct {
	Version int    `msgpack:"v"`
	ID      string `msgpack:"id"`
	Code    Code   `msgpack:"c"`
	Message string `msgpack:"msg,omitempty"`
	// Details are marshalled google.protobuf.Any messages.
	Details [][]byte `msgpack:"x,omitempty"`
	Header  Metadata `msgpack:"h,omitempty"`
	Trailer Metadata `msgpack:"tr,omitempty"`
	Payload []byte   `msgpack:"p,omitempty"`
}

// errEnvelopeVersion reports an envelope written by a different rpr version.
type errEnvelopeVersion struct{ got int }

func (e errEnvelopeVersion) Error() string {
	return fmt.Sprintf("envelope version %d is not supported (this rpr speaks version %d): run the same rpr release on both sides", e.got, envelopeVersion)
}

func marshalEnvelope(v any) ([]byte, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("rpr: encode envelope: %w", err)
	}
	return b, nil
}

// decodeStrict decodes b into v, refusing unknown fields and trailing
// bytes. An envelope from another rpr version is reported as such, because
// that message tells the operator what to fix.
func decodeStrict(b []byte, v any, version func() int) error {
	r := bytes.NewReader(b)
	dec := msgpack.NewDecoder(r)
	dec.DisallowUnknownFields(true)
	err := dec.Decode(v)
	if err == nil && r.Len() > 0 {
		err = fmt.Errorf("%d trailing bytes after the envelope", r.Len())
	}
	if err != nil || version() != envelopeVersion {
		if got := peekVersion(b); got > 0 && got != envelopeVersion {
			return errEnvelopeVersion{got: got}
		}
	}
	if err != nil {
		return fmt.Errorf("malformed envelope: %w", err)
	}
	if version() != envelopeVersion {
		return errors.New("malformed envelope: no version")
	}
	return nil
}

// peekVersion reads only the version field, ignoring everything else; it
// returns -1 when even that is unreadable.
func peekVersion(b []byte) int {
	var head struct {
		Version int `msgpack:"v"`
	}
	if err := msgpack.Unmarshal(b, &head); err != nil {
		return -1
	}
	return head.Version
}

// decodeRequest decodes and validates a request envelope.
func decodeRequest(b []byte) (*requestEnvelope, error) {
	env := new(requestEnvelope)
	if err := decodeStrict(b, env, func() int { return env.Version }); err != nil {
		return nil, err
	}
	switch {
	case env.ID == "":
		return nil, errors.New("malformed envelope: no request id")
	case env.Method == "":
		return nil, errors.New("malformed envelope: no method")
	case env.Attempt < 1:
		return nil, fmt.Errorf("malformed envelope: attempt %d (attempts count from 1)", env.Attempt)
	}
	switch env.Kind {
	case kindUnary:
		switch {
		case env.ReplyTo == "":
			return nil, errors.New("malformed envelope: no reply-to stream")
		case env.Deadline <= 0:
			return nil, errors.New("malformed envelope: no deadline")
		}
	case kindAsync:
		if env.ReplyTo != "" {
			return nil, errors.New("malformed envelope: async request with a reply-to stream")
		}
		if env.Key == "" {
			env.Key = env.ID
		}
	default:
		return nil, fmt.Errorf("malformed envelope: unknown call kind %d", env.Kind)
	}
	return env, nil
}

// decodeResponse decodes and validates a response envelope.
func decodeResponse(b []byte) (*responseEnvelope, error) {
	env := new(responseEnvelope)
	if err := decodeStrict(b, env, func() int { return env.Version }); err != nil {
		return nil, err
	}
	if env.ID == "" {
		return nil, errors.New("malformed response envelope: no request id")
	}
	return env, nil
}

// peekReplyAddress reads the id and reply-to stream of an envelope that
// failed strict decoding, so the caller can still be told why. Both are
// empty when they cannot be read.
func peekReplyAddress(b []byte) (id, replyTo string) {
	var head struct {
		ID      string `msgpack:"id"`
		ReplyTo string `msgpack:"r"`
	}
	if err := msgpack.Unmarshal(b, &head); err != nil {
		return "", ""
	}
	return head.ID, head.ReplyTo
}
