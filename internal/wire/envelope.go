package wire

import (
	"errors"
	"fmt"
	"unsafe"
)

// Version is the wire version of unary and async envelopes, which a v1
// peer reads. A change to an envelope's meaning gets a new version;
// decoders refuse versions they do not know rather than guess.
const Version = 1

// StreamVersion is the wire version of what streaming calls write: the
// request that opens a stream and its frames. A peer that speaks only
// Version refuses such a request with a VersionError, which tells the
// caller to run the same rpr release on both sides.
const StreamVersion = 2

// SignedVersion is the wire version of envelopes of authenticated
// callers: a Request or Response that carries Caller, Sig or Sealed, of
// any Kind. A peer that speaks only Version and StreamVersion refuses it
// with a VersionError, as it should: it could neither verify nor answer
// it as the caller expects.
const SignedVersion = 3

// Field is the one stream field that holds an envelope.
const Field = "e"

// Metadata is a header or trailer: lower-case keys, each with a list of
// values, as gRPC metadata and HTTP headers have.
type Metadata = map[string][]string

// Kind says how the caller waits for the outcome.
type Kind uint8

const (
	KindUnary  Kind = 1 // the caller waits for a response
	KindAsync  Kind = 2 // fire and forget: servers retry, then dead-letter
	KindStream Kind = 3 // a streaming call (StreamVersion)
)

// Which sides of a streaming call stream (Request.Streams).
const (
	StreamsClient uint8 = 1 << iota // the caller sends a stream of messages
	StreamsServer                   // the server sends a stream of messages
)

// Request is what a client writes to a request stream. Field names
// are short because every call carries them. The struct tags are the wire
// format: EncodeRequest and DecodeRequest write and read it by hand, and
// their tests check them against msgpack's reflection codec, which reads
// these tags.
type Request struct {
	Version int    `msgpack:"v"`
	ID      string `msgpack:"id"`
	// Method is "service/method".
	Method string `msgpack:"m"`
	// Deadline is unix milliseconds on Redis's clock (each side measures its offset to Redis's TIME). An
	// async request has none: it waits in the queue as long as it must.
	Deadline int64    `msgpack:"dl,omitempty"`
	Header   Metadata `msgpack:"h,omitempty"`
	// ReplyTo is the caller's response stream (unary calls only).
	ReplyTo string `msgpack:"r,omitempty"`
	// Enqueued is unix milliseconds on Redis's clock when the call was sent.
	Enqueued int64 `msgpack:"t"`
	Attempt  int   `msgpack:"a"`
	Kind     Kind  `msgpack:"k"`
	// Payload is the request message, marshalled. Decoded from a string
	// (DecodeRequestString) it shares the string's memory: read it, never
	// write to it.
	Payload []byte `msgpack:"p"`

	// The fields below are for async requests only.

	// Key is the idempotency key: at most one request per key succeeds
	// within the servers' IdempotencyWindow. It names the state hash. On
	// the wire it is left out when it is the request id (the default), and
	// DecodeRequest fills it in.
	Key string `msgpack:"ik,omitempty"`
	// Retry is the caller's retry policy; nil means the method's.
	Retry *RetryPolicy `msgpack:"rp,omitempty"`
	// Timeout bounds each attempt's handler, in milliseconds; 0 means the
	// method's.
	Timeout int64 `msgpack:"to,omitempty"`
	// Replays counts how often an operator replayed the request from the
	// dead-letter stream (Attempt starts again at 1 on each replay).
	Replays int `msgpack:"rr,omitempty"`

	// The fields below are for stream opens only (KindStream). Deadline
	// then bounds the wait for a worker to take the stream, and
	// StreamDeadline the stream itself.

	// Streams says which sides stream: StreamsClient, StreamsServer or
	// both.
	Streams uint8 `msgpack:"sk,omitempty"`
	// Window and WindowBytes are the flow-control window the caller grants
	// the server: how many of the server's messages, and how many bytes of
	// them, may be sent and not yet consumed by the caller.
	Window      int   `msgpack:"sw,omitempty"`
	WindowBytes int64 `msgpack:"sb,omitempty"`
	// StreamDeadline ends the stream (Redis unix ms); 0: no deadline.
	StreamDeadline int64 `msgpack:"sd,omitempty"`
	// Messages counts the caller's messages the open carries: 0, or 1 with
	// the first in Payload (message 1 of the caller's stream).
	Messages int `msgpack:"sn,omitempty"`
	// Closed says the caller sends nothing after the open: its side of
	// the stream is closed (a server-streaming call).
	Closed bool `msgpack:"sc,omitempty"`

	// The fields below are for authenticated callers only
	// (SignedVersion); see CallerKey for how they are made.

	// Caller names the caller whose key signed the request.
	Caller string `msgpack:"ca,omitempty"`
	// Sealed holds Header and Payload encrypted with the caller's key; a
	// sealed request carries neither in the clear.
	Sealed []byte `msgpack:"sx,omitempty"`
	// Sig is the caller's signature of the request (CallerKey.SignRequest).
	Sig []byte `msgpack:"sg,omitempty"`
}

// RetryPolicy is a RetryPolicy as an async request carries it, so that
// the servers retry it the way its caller asked.
type RetryPolicy struct {
	MaxAttempts    int      `msgpack:"n,omitempty"`
	InitialBackoff int64    `msgpack:"i,omitempty"` // milliseconds
	MaxBackoff     int64    `msgpack:"x,omitempty"` // milliseconds
	Multiplier     float64  `msgpack:"m,omitempty"`
	RetryableCodes []uint32 `msgpack:"c,omitempty"`
}

// Response is what a server writes to a caller's response stream.
// Like Request's, its struct tags are the wire format.
type Response struct {
	Version int    `msgpack:"v"`
	ID      string `msgpack:"id"`
	// Code is the status code, numbered as in gRPC (see CodeName).
	Code    uint32 `msgpack:"c"`
	Message string `msgpack:"msg,omitempty"`
	// Details are marshalled google.protobuf.Any messages.
	Details [][]byte `msgpack:"x,omitempty"`
	Header  Metadata `msgpack:"h,omitempty"`
	Trailer Metadata `msgpack:"tr,omitempty"`
	// Payload is the response message, marshalled; decoded from a string
	// (DecodeResponseString) or a lent buffer (DecodeResponseLentInto) it
	// shares that memory, read-only.
	Payload []byte `msgpack:"p,omitempty"`
	// Refused says the server turned the call down before any of it ran
	// (a stream over ServerOptions.MaxStreams, an open it cannot take):
	// the caller may open it again. Only StreamVersion and SignedVersion
	// responses carry it.
	Refused bool `msgpack:"rf,omitempty"`
	// Sealed holds everything but ID and Code encrypted with the caller's
	// key, for a caller that sealed its request (SignedVersion).
	Sealed []byte `msgpack:"sx,omitempty"`
	// Sig is the server's signature with the caller's key
	// (CallerKey.SignResponse): the answer to an authenticated caller is
	// signed, so that the caller can reject a forged one.
	Sig []byte `msgpack:"sg,omitempty"`
}

// VersionError reports an envelope written by a different rpr version.
type VersionError struct{ Got int }

func (e VersionError) Error() string {
	return fmt.Sprintf("envelope version %d is not supported (this rpr speaks versions %d to %d): run the same rpr release on both sides", e.Got, Version, SignedVersion)
}

// knownVersion reports whether this runtime speaks envelope version v.
func knownVersion(v int) bool { return v == Version || v == StreamVersion || v == SignedVersion }

// marshalEnvelope encodes a *Request or *Response with the
// hand-written codec (EncodeRequest, EncodeResponse), for callers (tests)
// that hold either.
func marshalEnvelope(v any) ([]byte, error) {
	switch env := v.(type) {
	case *Request:
		return EncodeRequest(env)
	case *Response:
		return EncodeResponse(env)
	default:
		return nil, fmt.Errorf("rpr: encode envelope: %T is not an envelope", v)
	}
}

// decodeStrict runs decode, which refuses unknown fields, wrong types and
// trailing bytes, over b. An envelope from another rpr version is reported
// as such, because that message tells the operator what to fix.
func decodeStrict(b []byte, decode func([]byte) error, version func() int) error {
	err := decode(b)
	if err != nil || !knownVersion(version()) {
		if got := peekVersion(b); got > 0 && !knownVersion(got) {
			return VersionError{Got: got}
		}
	}
	if err != nil {
		return fmt.Errorf("malformed envelope: %w", err)
	}
	if !knownVersion(version()) {
		return errors.New("malformed envelope: no version")
	}
	return nil
}

// peekVersion reads only the version field, skipping everything else; it
// returns -1 when even that is unreadable.
func peekVersion(b []byte) int {
	version := 0
	err := scanEnvelope(b, func(r *envelopeReader, key []byte) (err error) {
		if string(key) == "v" {
			version, err = decodeInt[int](r)
			return err
		}
		return r.skip()
	})
	if err != nil {
		return -1
	}
	return version
}

// DecodeRequest decodes and validates a request envelope.
func DecodeRequest(b []byte) (*Request, error) { return decodeRequestFrom(b, shareNothing) }

// DecodeRequestString is DecodeRequest for an envelope as Redis hands it
// over: a string, whose bytes are read in place and whose memory the
// envelope's strings share, which spares a copy of each.
func DecodeRequestString(raw string) (*Request, error) {
	return decodeRequestFrom(stringBytes(raw), shareAll)
}

// DecodeRequestStringInto is DecodeRequestString into env, a zero Request
// its caller allocated with what else it keeps for the request (one
// allocation instead of two). On error env holds whatever was decoded
// before the error, which nothing may use.
func DecodeRequestStringInto(raw string, env *Request) error {
	return decodeRequestInto(stringBytes(raw), shareAll, env)
}

// DecodeRequestLentInto is DecodeRequestStringInto for raw in a lent
// buffer (see DecodeResponseLentInto): only env.Payload shares raw's
// memory.
func DecodeRequestLentInto(raw string, env *Request) error {
	return decodeRequestInto(stringBytes(raw), sharePayload, env)
}

// decodeRequestFrom decodes b, sharing its memory as share says.
func decodeRequestFrom(b []byte, share sharing) (*Request, error) {
	env := new(Request)
	if err := decodeRequestInto(b, share, env); err != nil {
		return nil, err
	}
	return env, nil
}

// decodeRequestInto decodes b into env and validates it.
func decodeRequestInto(b []byte, share sharing, env *Request) error {
	decode := func(b []byte) error { return decodeRequestFields(b, share, env) }
	if err := decodeStrict(b, decode, func() int { return env.Version }); err != nil {
		return err
	}
	switch {
	case env.ID == "":
		return errors.New("malformed envelope: no request id")
	case env.Method == "":
		return errors.New("malformed envelope: no method")
	case env.Attempt < 1:
		return fmt.Errorf("malformed envelope: attempt %d (attempts count from 1)", env.Attempt)
	}
	if env.Kind != KindStream && env.hasStreamFields() {
		return errors.New("malformed envelope: stream fields in a request that is not a stream")
	}
	if err := checkSigned(env.Version, env.Caller != "" || env.Sig != nil || env.Sealed != nil, env.Sealed != nil && (env.Header != nil || env.Payload != nil)); err != nil {
		return err
	}
	if env.Version == SignedVersion && !ValidCallerName(env.Caller) {
		return fmt.Errorf("malformed envelope: caller name %q (want 1 to %d of A-Z a-z 0-9 . _ -)", env.Caller, maxCallerName)
	}
	switch env.Kind {
	case KindUnary:
		switch {
		case env.ReplyTo == "":
			return errors.New("malformed envelope: no reply-to stream")
		case env.Deadline <= 0:
			return errors.New("malformed envelope: no deadline")
		}
	case KindStream:
		if err := env.checkStream(); err != nil {
			return err
		}
	case KindAsync:
		if env.ReplyTo != "" {
			return errors.New("malformed envelope: async request with a reply-to stream")
		}
		if env.Key == "" {
			env.Key = env.ID
		}
	default:
		return fmt.Errorf("malformed envelope: unknown call kind %d", env.Kind)
	}
	return nil
}

// checkSigned checks that the fields of authenticated callers (signed)
// come in SignedVersion envelopes, that those are signed, and that a
// sealed envelope carries nothing in the clear that it seals (clear).
func checkSigned(version int, signed, clear bool) error {
	switch {
	case signed && version != SignedVersion:
		return fmt.Errorf("malformed envelope: a caller, signature or sealed part in a version %d envelope (they are version %d)", version, SignedVersion)
	case version == SignedVersion && !signed:
		return fmt.Errorf("malformed envelope: a version %d envelope without a signature", SignedVersion)
	case clear:
		return errors.New("malformed envelope: sealed, yet with sealed fields in the clear")
	}
	return nil
}

// hasStreamFields reports whether any stream-only field is set.
func (env *Request) hasStreamFields() bool {
	return env.Streams != 0 || env.Window != 0 || env.WindowBytes != 0 || env.StreamDeadline != 0 || env.Messages != 0 || env.Closed
}

// checkStream validates a stream open.
func (env *Request) checkStream() error {
	switch {
	case env.Version != StreamVersion && env.Version != SignedVersion:
		return fmt.Errorf("malformed envelope: a stream open of version %d (streams are version %d, or %d when signed)", env.Version, StreamVersion, SignedVersion)
	case env.ReplyTo == "":
		return errors.New("malformed envelope: no reply-to stream")
	case env.Deadline <= 0:
		return errors.New("malformed envelope: no deadline")
	case env.Streams == 0 || env.Streams&^(StreamsClient|StreamsServer) != 0:
		return fmt.Errorf("malformed envelope: stream sides %d (want 1, 2 or 3)", env.Streams)
	case env.Window < 1 || env.WindowBytes < 1:
		return fmt.Errorf("malformed envelope: flow-control window %d messages, %d bytes (want both positive)", env.Window, env.WindowBytes)
	case env.Messages < 0 || env.Messages > 1:
		return fmt.Errorf("malformed envelope: %d messages in a stream open (want 0 or 1)", env.Messages)
	case env.Messages == 0 && len(env.Payload) > 0:
		return errors.New("malformed envelope: a payload in a stream open that carries no message")
	}
	return nil
}

// DecodeResponse decodes and validates a response envelope.
func DecodeResponse(b []byte) (*Response, error) { return decodeResponseFrom(b, shareNothing) }

// DecodeResponseString is DecodeResponse for a string (see
// DecodeRequestString).
func DecodeResponseString(raw string) (*Response, error) {
	return decodeResponseFrom(stringBytes(raw), shareAll)
}

// decodeResponseFrom decodes b, sharing its memory as share says.
func decodeResponseFrom(b []byte, share sharing) (*Response, error) {
	env := new(Response)
	if err := decodeResponseInto(b, share, env); err != nil {
		return nil, err
	}
	return env, nil
}

// DecodeResponseStringInto is DecodeResponseString into env, a zero
// Response of its caller's (see DecodeRequestStringInto).
func DecodeResponseStringInto(raw string, env *Response) error {
	return decodeResponseInto(stringBytes(raw), shareAll, env)
}

// DecodeResponseLentInto is DecodeResponseStringInto for raw in a lent
// buffer, one its owner reuses once the payload has been read: only
// env.Payload shares raw's memory, and the id, message, details and
// metadata are copied, so that they may be kept after the buffer is
// reused.
func DecodeResponseLentInto(raw string, env *Response) error {
	return decodeResponseInto(stringBytes(raw), sharePayload, env)
}

// decodeResponseInto decodes b into env and validates it.
func decodeResponseInto(b []byte, share sharing, env *Response) error {
	decode := func(b []byte) error { return decodeResponseFields(b, share, env) }
	if err := decodeStrict(b, decode, func() int { return env.Version }); err != nil {
		return err
	}
	if env.ID == "" {
		return errors.New("malformed response envelope: no request id")
	}
	return checkSigned(env.Version, env.Sig != nil || env.Sealed != nil, env.Sealed != nil && (env.Message != "" || env.Details != nil || env.Header != nil || env.Trailer != nil || env.Payload != nil || env.Refused))
}

// PeekReplyAddress reads the id and reply-to stream of an envelope that
// failed strict decoding, so the caller can still be told why. Both are
// empty when they cannot be read.
func PeekReplyAddress(b []byte) (id, replyTo string) {
	err := scanEnvelope(b, func(r *envelopeReader, key []byte) (err error) {
		switch string(key) {
		case "id":
			id, err = r.string()
		case "r":
			replyTo, err = r.string()
		default:
			err = r.skip()
		}
		return err
	})
	if err != nil {
		return "", ""
	}
	return id, replyTo
}

// stringBytes returns the bytes of s without copying them. They must not
// be written to: only the envelope decoder, which only reads, gets them.
func stringBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// StateName names the request's state hash (store.Shard.State): its
// idempotency key, which for a signed request whose caller chose the key
// is scoped by the caller, "caller/key", so that one caller's key never
// decides whether another caller's request runs.
func (env *Request) StateName() string {
	if env.Caller != "" && env.Key != env.ID {
		return env.Caller + "/" + env.Key
	}
	return env.Key
}
