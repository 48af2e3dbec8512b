package tunnel

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/rprtunnel/rpr/internal/wire"
)

// Authenticated callers. Whoever can write to a service's request stream
// can put any envelope there, so a header cannot say who the caller is. A
// caller that has a secret shared with the servers signs what it writes
// with it (HMAC-SHA256, see Credentials); servers that trust it (Trust)
// verify the signature before anything runs, take the caller's identity
// from the key that verified it, authorize the method, and sign their
// answer with the same key, so the caller rejects an answer it did not
// get from a server. Sealing additionally encrypts payloads and metadata
// (AES-256-GCM), so read access to Redis does not reveal them.

// Credentials identify a Client to the servers it calls: ClientOptions.Credentials.
type Credentials struct {
	// Caller is the caller's name, as the servers' Trust.Keys lists it:
	// 1 to 64 of A-Z a-z 0-9 . _ -.
	Caller string
	// Secret is the caller's secret (at least 32 random bytes, e.g. from
	// NewCallerSecret), known to the servers that trust this caller and
	// to no other caller.
	Secret []byte
	// Seal encrypts each request's payload and metadata, and has the
	// servers encrypt their answers, with a key derived from Secret. What
	// stays readable in Redis: method names, request ids, deadlines,
	// status codes, the caller's name, sizes and timing. Streaming calls
	// cannot be sealed (their messages travel as frames, which are
	// neither sealed nor signed): opening one fails with
	// FAILED_PRECONDITION.
	Seal bool
}

// NewCallerSecret returns a new random 32-byte caller secret.
func NewCallerSecret() []byte {
	secret := make([]byte, wire.MinCallerSecret)
	if _, err := rand.Read(secret); err != nil {
		panic(fmt.Sprintf("rpr: crypto/rand failed: %v", err)) // crypto/rand never fails on supported systems
	}
	return secret
}

// EncodeCallerSecret writes a caller secret as text (unpadded base64url),
// the form ParseCallerSecret reads, for configuration files and
// environment variables.
func EncodeCallerSecret(secret []byte) string {
	return base64.RawURLEncoding.EncodeToString(secret)
}

// ParseCallerSecret reads a caller secret written by EncodeCallerSecret
// (base64url or standard base64, padded or not).
func ParseCallerSecret(text string) ([]byte, error) {
	text = strings.TrimSpace(text)
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.StdEncoding} {
		if secret, err := enc.DecodeString(text); err == nil {
			if len(secret) < wire.MinCallerSecret {
				return nil, fmt.Errorf("rpr: caller secret is %d bytes; it must be at least %d (make one with tunnel.NewCallerSecret or `rpr keys new`)", len(secret), wire.MinCallerSecret)
			}
			return secret, nil
		}
	}
	return nil, fmt.Errorf("rpr: caller secret is not base64 (make one with tunnel.NewCallerSecret or `rpr keys new`)")
}

// callerIdentity is a Client's signing identity, made from its
// Credentials.
type callerIdentity struct {
	name string
	key  *wire.CallerKey
	seal bool
}

// Validate reports what is wrong with c: a caller name that is not 1 to
// 64 of A-Z a-z 0-9 . _ -, or a secret shorter than 32 bytes.
func (c *Credentials) Validate() error {
	_, err := newCallerIdentity(c)
	return err
}

// newCallerIdentity checks creds; nil creds give a nil identity.
func newCallerIdentity(creds *Credentials) (*callerIdentity, error) {
	if creds == nil {
		return nil, nil
	}
	if !wire.ValidCallerName(creds.Caller) {
		return nil, fmt.Errorf("rpr: credentials: caller name %q: a caller name is 1 to 64 of A-Z a-z 0-9 . _ -", creds.Caller)
	}
	key, err := wire.NewCallerKey(creds.Secret)
	if err != nil {
		return nil, fmt.Errorf("rpr: credentials of %q: %w", creds.Caller, err)
	}
	return &callerIdentity{name: creds.Caller, key: key, seal: creds.Seal}, nil
}

// encodeRequest encodes env as this client sends it: sealed and signed
// when the client has Credentials.
func (c *Client) encodeRequest(env *wire.Request) ([]byte, error) {
	if err := c.secureRequest(env); err != nil {
		return nil, err
	}
	return wire.EncodeRequest(env)
}

// encodeRequestPooled is encodeRequest into a buffer of the client's pool:
// the envelope is *buf, which its caller gives back (c.buffers.Put) once
// the command that carries it has returned.
func (c *Client) encodeRequestPooled(env *wire.Request) (*[]byte, error) {
	if err := c.secureRequest(env); err != nil {
		return nil, err
	}
	buf := c.buffers.Get(wire.RequestCap(env))
	out, err := wire.AppendRequest((*buf)[:0], env)
	if err != nil {
		c.buffers.Put(buf)
		return nil, err
	}
	*buf = out
	return buf, nil
}

// secureRequest seals and signs env as the client's Credentials ask.
func (c *Client) secureRequest(env *wire.Request) error {
	if id := c.identity; id != nil {
		if id.seal {
			if err := id.key.SealRequest(env); err != nil {
				return err
			}
		}
		id.key.SignRequest(env, id.name)
	}
	return nil
}

// authentic checks an answer read from this client's response stream.
// Without Credentials every answer is taken as it is. With them, a signed
// answer must verify with the client's key (and is opened when sealed);
// an unsigned one is taken only as an error, whose message says so: a
// server refuses a request it could not verify (or read) without
// signing, and an error is all a forger can make of it.
func (c *Client) authentic(resp *wire.Response) error {
	id := c.identity
	if id == nil {
		return nil
	}
	if resp.Sig == nil {
		if Code(resp.Code) == OK || resp.Sealed != nil {
			return fmt.Errorf("an unsigned answer with code %s to a signed request (a server answers signed requests signed; this one may be forged)", Code(resp.Code))
		}
		resp.Message = "(unsigned answer: the server did not verify this caller, or someone else wrote it) " + resp.Message
		return nil
	}
	if !id.key.VerifyResponse(resp) {
		return fmt.Errorf("an answer whose signature is not this caller's key's (forged, or the server has another key for %q)", id.name)
	}
	if resp.Sealed != nil {
		if err := id.key.OpenResponse(resp); err != nil {
			return err
		}
	}
	return nil
}

// cancelMessage is what this client publishes to cancel request rid of
// service: the id alone, or signed with its key.
func (c *Client) cancelMessage(service, rid string) string {
	if id := c.identity; id != nil {
		return id.key.CancelMessage(service, rid, id.name)
	}
	return rid
}

// callerKey is the context key of a verified caller's name.
type callerKey struct{}

// CallerOf returns the name of the authenticated caller of the request a
// handler serves: the caller whose key (Trust.Keys) verified the request's
// signature. ok is false for a request that was not signed (accepted
// because Trust.AllowUnsigned is set, or the server has no Trust), whose
// caller is unknown: headers such as x-rpr-caller are whatever its
// writer put there.
func CallerOf(ctx context.Context) (caller string, ok bool) {
	caller, ok = ctx.Value(callerKey{}).(string)
	return caller, ok
}

// withCaller returns ctx carrying the verified caller's name.
func withCaller(ctx context.Context, caller string) context.Context {
	if caller == "" {
		return ctx
	}
	return context.WithValue(ctx, callerKey{}, caller)
}
