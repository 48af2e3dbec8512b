package wire

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math"
	"slices"
	"strings"
	"sync"
)

// MinCallerSecret is the shortest secret NewCallerKey takes: 32 bytes, the
// size of an HMAC-SHA256 key and of an AES-256 key.
const MinCallerSecret = 32

// maxCallerName bounds a caller's name, which every signed envelope
// carries.
const maxCallerName = 64

// ValidCallerName reports whether name can name a caller: 1 to 64 of
// A-Z a-z 0-9 . _ -, so that it fits in a key name, a log line and an ACL
// rule as it is, and never contains the "/" that scopes an idempotency
// key (Request.StateName).
func ValidCallerName(name string) bool {
	if name == "" || len(name) > maxCallerName {
		return false
	}
	for _, c := range []byte(name) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// A CallerKey is the secret a caller shares with the servers that trust
// it, in the two forms the protocol uses: an HMAC-SHA256 key that signs
// what the caller writes and what servers answer it, and an AES-256-GCM key
// that seals (encrypts) payloads and metadata when the caller asks for it.
// Both are derived from the secret, so a caller has one secret to keep:
//
//	signing key = HMAC-SHA256(secret, "rpr/v3 sign")
//	sealing key = HMAC-SHA256(secret, "rpr/v3 seal")
//
// A signature is HMAC-SHA256(signing key, what) of a canonical encoding of
// the envelope (signedRequest, signedResponse) that leaves out what
// servers change as a request moves (Attempt, Replays) and the signature
// itself, so a retried or replayed request keeps its caller's signature.
type CallerKey struct {
	seal cipher.AEAD
	// macs holds keyed HMAC states, reset between uses: making one costs
	// as much as signing a small envelope with it.
	macs sync.Pool
}

// NewCallerKey derives a caller's keys from its secret, which must be at
// least MinCallerSecret random bytes.
func NewCallerKey(secret []byte) (*CallerKey, error) {
	if len(secret) < MinCallerSecret {
		return nil, fmt.Errorf("rpr: caller key: the secret is %d bytes; it must be at least %d random bytes (tunnel.NewCallerSecret makes one)", len(secret), MinCallerSecret)
	}
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	block, err := aes.NewCipher(derive("rpr/v3 seal"))
	if err != nil {
		return nil, fmt.Errorf("rpr: caller key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("rpr: caller key: %w", err)
	}
	signKey := derive("rpr/v3 sign")
	k := &CallerKey{seal: aead}
	k.macs.New = func() any { return hmac.New(sha256.New, signKey) }
	return k, nil
}

// mac returns the signature of msg.
func (k *CallerKey) mac(msg []byte) []byte {
	m := k.macs.Get().(hash.Hash)
	m.Write(msg)
	sum := m.Sum(nil)
	m.Reset()
	k.macs.Put(m)
	return sum
}

// SignRequest stamps env as caller's: it sets Version to SignedVersion,
// Caller, and Sig over the rest. Seal first if the request is to be sealed.
func (k *CallerKey) SignRequest(env *Request, caller string) {
	env.Version, env.Caller = SignedVersion, caller
	env.Sig = k.mac(signedRequest(env))
}

// VerifyRequest reports whether env's signature is this key's.
func (k *CallerKey) VerifyRequest(env *Request) bool {
	return env.Sig != nil && hmac.Equal(env.Sig, k.mac(signedRequest(env)))
}

// SignResponse signs env, the answer to a request of this key's caller,
// and sets its Version to SignedVersion. Seal first if it is to be sealed.
func (k *CallerKey) SignResponse(env *Response) {
	env.Version = SignedVersion
	env.Sig = k.mac(signedResponse(env))
}

// VerifyResponse reports whether env's signature is this key's.
func (k *CallerKey) VerifyResponse(env *Response) bool {
	return env.Sig != nil && hmac.Equal(env.Sig, k.mac(signedResponse(env)))
}

// CancelMessage is what a caller publishes on the service's cancel channel
// to cancel request id: "id caller signature(hex)", the signature over
// "rpr/v3 cancel", service and id.
func (k *CallerKey) CancelMessage(service, id, caller string) string {
	return id + " " + caller + " " + fmt.Sprintf("%x", k.mac(cancelSigned(service, id)))
}

// VerifyCancel reports whether sig (hex, from ParseCancel) is this key's
// signature of cancelling request id of service.
func (k *CallerKey) VerifyCancel(service, id, sig string) bool {
	want := fmt.Sprintf("%x", k.mac(cancelSigned(service, id)))
	return hmac.Equal([]byte(sig), []byte(want))
}

// ParseCancel splits a message of the cancel channel: a request id alone
// (an unauthenticated caller's), or "id caller signature" (CancelMessage).
func ParseCancel(msg string) (id, caller, sig string) {
	id, rest, signed := strings.Cut(msg, " ")
	if !signed {
		return msg, "", ""
	}
	caller, sig, _ = strings.Cut(rest, " ")
	return id, caller, sig
}

func cancelSigned(service, id string) []byte {
	var b signedWriter
	b.str("rpr/v3 cancel")
	b.str(service)
	b.str(id)
	return b
}

// SealRequest encrypts env's Header and Payload into Sealed and clears
// them; the nonce is random and the request id is authenticated with them.
func (k *CallerKey) SealRequest(env *Request) error {
	w := newEnvelopeWriter(len(env.Payload) + metadataBytes(env.Header))
	defer w.release()
	w.mapLen(2)
	w.metadata("h", env.Header)
	w.bytes("p", env.Payload)
	inner, err := w.result()
	if err != nil {
		return fmt.Errorf("rpr: seal request: %w", err)
	}
	env.Sealed, env.Header, env.Payload = k.sealBytes(inner, "rpr/v3 sealed request", env.ID), nil, nil
	return nil
}

// OpenRequest decrypts a sealed request's Sealed into Header and Payload
// (Sealed stays, so the request is written again as it came).
func (k *CallerKey) OpenRequest(env *Request) error {
	inner, err := k.openBytes(env.Sealed, "rpr/v3 sealed request", env.ID)
	if err != nil {
		return err
	}
	return decodeEnvelope(inner, shareNothing, func(r *envelopeReader) error {
		return r.fields(func(key []byte) (err error) {
			switch string(key) {
			case "h":
				err = r.metadata(&env.Header)
			case "p":
				env.Payload, err = r.bytes()
			default:
				err = errUnknownField
			}
			return err
		})
	})
}

// SealResponse encrypts all of env but ID and Code into Sealed and clears
// those fields.
func (k *CallerKey) SealResponse(env *Response) error {
	w := newEnvelopeWriter(responseBulk(env))
	defer w.release()
	w.mapLen(present(env.Message != "", len(env.Details) > 0, len(env.Header) > 0,
		len(env.Trailer) > 0, len(env.Payload) > 0, env.Refused))
	writeResponseBody(w, env)
	inner, err := w.result()
	if err != nil {
		return fmt.Errorf("rpr: seal response: %w", err)
	}
	*env = Response{Version: env.Version, ID: env.ID, Code: env.Code, Sealed: k.sealBytes(inner, "rpr/v3 sealed response", env.ID)}
	return nil
}

// OpenResponse decrypts a sealed response into its fields.
func (k *CallerKey) OpenResponse(env *Response) error {
	inner, err := k.openBytes(env.Sealed, "rpr/v3 sealed response", env.ID)
	if err != nil {
		return err
	}
	var body Response
	if err := decodeResponseFields(inner, shareNothing, &body); err != nil {
		return fmt.Errorf("rpr: open response: %w", err)
	}
	if body.Version != 0 || body.ID != "" || body.Code != 0 || body.Sealed != nil || body.Sig != nil {
		return errors.New("rpr: open response: the sealed part repeats fields that travel in the clear")
	}
	env.Message, env.Details, env.Header, env.Trailer, env.Payload, env.Refused = body.Message, body.Details, body.Header, body.Trailer, body.Payload, body.Refused
	env.Sealed = nil
	return nil
}

func (k *CallerKey) sealBytes(plain []byte, label, id string) []byte {
	nonce := make([]byte, k.seal.NonceSize(), k.seal.NonceSize()+len(plain)+k.seal.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic(fmt.Sprintf("rpr: crypto/rand failed: %v", err)) // crypto/rand never fails on supported systems
	}
	return k.seal.Seal(nonce, nonce, plain, []byte(label+"\x00"+id))
}

func (k *CallerKey) openBytes(sealed []byte, label, id string) ([]byte, error) {
	n := k.seal.NonceSize()
	if len(sealed) < n+k.seal.Overhead() {
		return nil, fmt.Errorf("rpr: open sealed envelope: %d bytes is shorter than a nonce and a tag", len(sealed))
	}
	plain, err := k.seal.Open(nil, sealed[:n], sealed[n:], []byte(label+"\x00"+id))
	if err != nil {
		return nil, errors.New("rpr: open sealed envelope: it was not sealed with this caller's key, or it was altered")
	}
	return plain, nil
}

// signedWriter builds the canonical encoding a signature covers: each
// value length-prefixed (uvarint), integers as varints, metadata with its
// names sorted, so that the same envelope gives the same bytes on every
// peer whatever order a map was written in.
type signedWriter []byte

func (b *signedWriter) str(s string) {
	*b = binary.AppendUvarint(*b, uint64(len(s)))
	*b = append(*b, s...)
}

func (b *signedWriter) bin(p []byte) {
	if p == nil {
		*b = append(*b, 0)
		return
	}
	*b = append(*b, 1)
	*b = binary.AppendUvarint(*b, uint64(len(p)))
	*b = append(*b, p...)
}

func (b *signedWriter) int(n int64) { *b = binary.AppendVarint(*b, n) }

func (b *signedWriter) metadata(md Metadata) {
	names := make([]string, 0, len(md))
	for name := range md {
		names = append(names, name)
	}
	slices.Sort(names)
	b.int(int64(len(names)))
	for _, name := range names {
		b.str(name)
		values := md[name]
		if values == nil {
			b.int(-1)
			continue
		}
		b.int(int64(len(values)))
		for _, v := range values {
			b.str(v)
		}
	}
}

// signedRequest is what a request's signature covers: every field but
// Attempt, Replays (which servers change) and Sig.
func signedRequest(env *Request) []byte {
	b := make(signedWriter, 0, 128+len(env.Payload)+len(env.Sealed))
	b.str("rpr/v3 request")
	b.int(int64(env.Version))
	b.str(env.ID)
	b.str(env.Method)
	b.int(env.Deadline)
	b.str(env.ReplyTo)
	b.int(env.Enqueued)
	b.int(int64(env.Kind))
	key := env.Key
	if key == env.ID {
		key = "" // DecodeRequest fills in the default key; the caller signed none
	}
	b.str(key)
	b.int(env.Timeout)
	if p := env.Retry; p != nil {
		b.int(1)
		b.int(int64(p.MaxAttempts))
		b.int(p.InitialBackoff)
		b.int(p.MaxBackoff)
		b.int(int64(math.Float64bits(p.Multiplier)))
		b.int(int64(len(p.RetryableCodes)))
		for _, c := range p.RetryableCodes {
			b.int(int64(c))
		}
	} else {
		b.int(0)
	}
	b.int(int64(env.Streams))
	b.int(int64(env.Window))
	b.int(env.WindowBytes)
	b.int(env.StreamDeadline)
	b.int(int64(env.Messages))
	b.int(boolInt(env.Closed))
	b.str(env.Caller)
	if env.Sealed != nil {
		b.int(1)
		b.bin(env.Sealed)
	} else {
		b.int(0)
		b.metadata(env.Header)
		b.bin(env.Payload)
	}
	return b
}

// signedResponse is what a response's signature covers: every field but
// Sig.
func signedResponse(env *Response) []byte {
	b := make(signedWriter, 0, 64+len(env.Payload)+len(env.Sealed))
	b.str("rpr/v3 response")
	b.int(int64(env.Version))
	b.str(env.ID)
	b.int(int64(env.Code))
	if env.Sealed != nil {
		b.int(1)
		b.bin(env.Sealed)
		return b
	}
	b.int(0)
	b.str(env.Message)
	b.int(int64(len(env.Details)))
	for _, d := range env.Details {
		b.bin(d)
	}
	b.metadata(env.Header)
	b.metadata(env.Trailer)
	b.bin(env.Payload)
	b.int(boolInt(env.Refused))
	return b
}

func boolInt(v bool) int64 {
	if v {
		return 1
	}
	return 0
}
