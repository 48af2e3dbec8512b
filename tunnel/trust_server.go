package tunnel

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/rprtunnel/rpr/internal/bufpool"
	"github.com/rprtunnel/rpr/internal/wire"
)

// Trust says which callers a Server takes requests from and what each may
// call: ServerOptions.Trust. A server with a Trust runs only requests
// signed by a caller it lists (unless AllowUnsigned), takes the caller's
// identity from the key that verified the signature (CallerOf; the
// x-rpr-caller header is set to it), refuses methods the caller is not
// allowed, signs its answers with the caller's key, and seals them when
// the request was sealed. A server without one refuses signed requests
// with FAILED_PRECONDITION, since it could not verify them nor sign the
// answer their caller expects.
type Trust struct {
	// Callers holds each trusted caller's secret by caller name (see
	// Credentials; secrets of at least 32 bytes).
	Callers map[string][]byte
	// Allow lists what each caller may call. Empty: every caller in
	// Callers may call every method of the server's services.
	Allow []Grant
	// AllowUnsigned also runs requests that carry no signature, with no
	// caller identity (CallerOf reports false): for a migration in which
	// some clients have no Credentials yet. Allow does not apply to them
	// (there is no caller to grant to): while it is set, anyone who can
	// write to the request stream may still call every method, as without
	// Trust. Default: they are refused with UNAUTHENTICATED. A request
	// signed with a bad signature is refused either way.
	AllowUnsigned bool
	// AllowCopies lets signed requests of methods that are not idempotent
	// take the fast path, as unsigned ones do, at the cost of replays: a
	// copy of such a request written again within its deadline (by
	// someone who can read and write the request stream: a server's Redis
	// user, not a caller's, see `rpr acl`) runs again. Default false: they
	// go through the state hash, where a copy finds the original's state,
	// which costs about four times the Redis work per call
	// (BenchmarkTrust). Idempotent methods take the fast path either way.
	AllowCopies bool
}

// A Grant allows Caller to call the methods Method matches.
type Grant struct {
	// Caller is a caller name from Trust.Callers, or "*" for all of them.
	Caller string
	// Method is a full method name ("pkg.v1.Orders/Create"), a service's
	// methods ("pkg.v1.Orders/*"), or "*" for every method.
	Method string
}

// matches reports whether g allows caller to call method.
func (g Grant) matches(caller, method string) bool {
	if g.Caller != "*" && g.Caller != caller {
		return false
	}
	if service, ok := strings.CutSuffix(g.Method, "/*"); ok {
		return strings.HasPrefix(method, service+"/")
	}
	return g.Method == "*" || g.Method == method
}

// trustedCallers is a Server's Trust with each caller's keys derived; nil
// for a server without Trust.
type trustedCallers struct {
	keys          map[string]*wire.CallerKey
	allow         []Grant
	allowUnsigned bool
	allowCopies   bool
}

// newTrustedCallers checks t and derives its callers' keys.
func newTrustedCallers(t *Trust) (*trustedCallers, error) {
	if t == nil {
		return nil, nil
	}
	if len(t.Callers) == 0 && !t.AllowUnsigned {
		return nil, fmt.Errorf("rpr: ServerOptions.Trust lists no callers, so it would refuse every request: add Trust.Callers (or set AllowUnsigned)")
	}
	tc := &trustedCallers{keys: make(map[string]*wire.CallerKey, len(t.Callers)), allow: t.Allow, allowUnsigned: t.AllowUnsigned, allowCopies: t.AllowCopies}
	for name, secret := range t.Callers {
		if !wire.ValidCallerName(name) {
			return nil, fmt.Errorf("rpr: ServerOptions.Trust.Callers: caller name %q: a caller name is 1 to 64 of A-Z a-z 0-9 . _ -", name)
		}
		key, err := wire.NewCallerKey(secret)
		if err != nil {
			return nil, fmt.Errorf("rpr: ServerOptions.Trust.Callers[%q]: %w", name, err)
		}
		tc.keys[name] = key
	}
	for i, g := range t.Allow {
		if g.Caller != "*" && tc.keys[g.Caller] == nil {
			return nil, fmt.Errorf("rpr: ServerOptions.Trust.Allow[%d]: caller %q is not in Trust.Callers (known: %s)", i, g.Caller, strings.Join(tc.names(), ", "))
		}
		if g.Method == "" || (g.Method != "*" && !strings.Contains(g.Method, "/")) {
			return nil, fmt.Errorf("rpr: ServerOptions.Trust.Allow[%d]: method %q: want \"pkg.Svc/Method\", \"pkg.Svc/*\" or \"*\"", i, g.Method)
		}
	}
	return tc, nil
}

func (tc *trustedCallers) names() []string { return slices.Sorted(maps.Keys(tc.keys)) }

// refusal is why a server will not run a request it read: the code its
// caller gets (unsigned, as the caller is not verified) and the reason,
// which the dead letter keeps too.
type refusal struct {
	code   Code
	reason string
}

// admit verifies env, as read from a request stream, against tc: it
// returns the caller and its key for a signed request that verified (its
// sealed part opened), nothing
// for an unsigned one that may run, or why the request is refused. env
// is left as it travels (a retry writes it again, signature and all);
// the handler sees the caller in its headers through handlerHeader.
func (tc *trustedCallers) admit(env *wire.Request) (key *wire.CallerKey, refused *refusal) {
	signed := env.Sig != nil
	switch {
	case tc == nil && !signed:
		return nil, nil
	case tc == nil:
		return nil, &refusal{FailedPrecondition, fmt.Sprintf("the request is signed by caller %q, but this server has no ServerOptions.Trust, so it can neither verify it nor sign its answer: give the server Trust with that caller's secret", env.Caller)}
	case !signed && tc.allowUnsigned:
		return nil, nil
	case !signed:
		return nil, &refusal{Unauthenticated, "the request is not signed, and this server takes only signed requests (ServerOptions.Trust): give the client ClientOptions.Credentials"}
	}
	key = tc.keys[env.Caller]
	switch {
	case key == nil:
		return nil, &refusal{Unauthenticated, fmt.Sprintf("caller %q is not one this server trusts (ServerOptions.Trust.Callers)", env.Caller)}
	case !key.VerifyRequest(env):
		return nil, &refusal{Unauthenticated, fmt.Sprintf("the signature of caller %q does not verify: the client's secret is not the one the server has for it, or the request was altered", env.Caller)}
	}
	if env.Sealed != nil {
		if err := key.OpenRequest(env); err != nil {
			return nil, &refusal{InvalidArgument, fmt.Sprintf("caller %q: %v", env.Caller, err)}
		}
	}
	return key, nil
}

// authorize returns the PERMISSION_DENIED error for a verified caller that
// may not call method, or nil.
func (tc *trustedCallers) authorize(caller, method, id string) error {
	if tc == nil || caller == "" || len(tc.allow) == 0 {
		return nil
	}
	for _, g := range tc.allow {
		if g.matches(caller, method) {
			return nil
		}
	}
	return Errorf(PermissionDenied, "%s [%s]: caller %q may not call this method (ServerOptions.Trust.Allow)", method, id, caller)
}

// encodeResponse encodes the answer to req: signed with its caller's key
// (and sealed when the request was) for a verified caller.
func (req *received) encodeResponse(resp *wire.Response) ([]byte, error) {
	if err := req.secureResponse(resp); err != nil {
		return nil, err
	}
	return wire.EncodeResponse(resp)
}

// encodeResponsePooled is encodeResponse into a buffer of pool: the
// envelope is *buf, which its caller gives back (pool.Put) once the
// command that carries it has returned.
func (req *received) encodeResponsePooled(pool *bufpool.Pool, resp *wire.Response) (*[]byte, error) {
	if err := req.secureResponse(resp); err != nil {
		return nil, err
	}
	buf := pool.Get(wire.ResponseCap(resp))
	out, err := wire.AppendResponse((*buf)[:0], resp)
	if err != nil {
		pool.Put(buf)
		return nil, err
	}
	*buf = out
	return buf, nil
}

// secureResponse signs resp with its caller's key (and seals it when the
// request was sealed), for a verified caller.
func (req *received) secureResponse(resp *wire.Response) error {
	if req.key != nil {
		if req.env.Sealed != nil {
			if err := req.key.SealResponse(resp); err != nil {
				return err
			}
		}
		req.key.SignResponse(resp)
	}
	return nil
}

// caller is the request's verified caller; "" for an unsigned request.
func (req *received) caller() string {
	if req.key == nil {
		return ""
	}
	return req.env.Caller
}

// handlerHeader is the request metadata the handler sees: the caller's,
// with x-rpr-caller set to the verified caller when there is one.
func (req *received) handlerHeader() Metadata {
	if req.key == nil {
		return Metadata(req.env.Header)
	}
	md := maps.Clone(Metadata(req.env.Header))
	if md == nil {
		md = Metadata{}
	}
	md[CallerHeader] = []string{req.env.Caller}
	return md
}

// replaySafe reports whether req may take the fast path, on which nothing
// but its delivery tells it has run: a copy of a signed request written
// again within its deadline would run again there. So a signed request
// of a method that is not idempotent takes the state hash's path, where
// the copy finds the original's state, unless Trust.AllowCopies.
func (tc *trustedCallers) replaySafe(req *received) bool {
	return req.key == nil || tc.allowCopies || (req.method != nil && req.method.Idempotent)
}
