package tunnel

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/internal/xread"
)

// Reading one request entry, and refusing what cannot be run: every entry
// that is unreadable, oversized or misaddressed is answered where there is
// a caller to tell and dead-lettered with the reason, alone.

// refuseUnread dead-letters an entry the server will not run, with reason,
// and answers its caller with code when the envelope names one.
func (r *serveRun) refuseUnread(q *queue, entryID, raw string, code Code, reason string) {
	id, replyTo := wire.PeekReplyAddress([]byte(raw))
	r.server.log.Error("rpr: request refused; dead-lettered", "stream", q.requests, "entry", entryID, "request_id", id, "reason", reason)
	r.deadLetter(q, entryID, raw, reason)
	if id != "" && q.keys.IsResponses(replyTo) {
		r.send(q, entryID, replyTo, errorResponse(id, Errorf(code, "the server of %s refused the request: %s", q.name, reason)))
	}
}

// decode reads one entry. Entries that cannot be run are answered with an
// error where there is a caller to tell, dead-lettered, acknowledged and
// logged, and decode returns nil; nothing in an entry can stop the server.
func (r *serveRun) decode(q *queue, msg xread.Entry) *received {
	s := r.server
	raw, ok := msg.Value(wire.Field)
	if !ok {
		s.log.Error("rpr: request entry has no envelope field; dead-lettered", "stream", q.requests, "entry", msg.ID)
		r.deadLetter(q, msg.ID, "", fmt.Sprintf("entry has no %q field", wire.Field))
		return nil
	}
	if limit := s.opts.MaxRequestBytes + MaxMetadataBytes + envelopeOverhead; len(raw) > limit {
		// Refused before decoding: decoding is what a hostile envelope
		// would make expensive.
		r.refuseUnread(q, msg.ID, raw, ResourceExhausted, fmt.Sprintf("envelope is %d bytes, over the server's %d-byte limit (ServerOptions.MaxRequestBytes for the payload, tunnel.MaxMetadataBytes for metadata)", len(raw), limit))
		return nil
	}
	req := r.requests.get() // the envelope is decoded into it: no allocation of its own
	env := &req.request
	decode := wire.DecodeRequestStringInto
	if msg.Lent != nil {
		decode = wire.DecodeRequestLentInto // only the payload in the buffer (see received.lent)
	}
	if err := decode(raw, env); err != nil {
		id, replyTo := wire.PeekReplyAddress([]byte(raw))
		s.log.Error("rpr: bad request envelope; dead-lettered", "stream", q.requests, "entry", msg.ID, "request_id", id, "error", err)
		r.deadLetter(q, msg.ID, raw, err.Error())
		if id != "" && q.keys.IsResponses(replyTo) {
			code := InvalidArgument
			var verr wire.VersionError
			if errors.As(err, &verr) {
				code = FailedPrecondition
			}
			r.send(q, msg.ID, replyTo, errorResponse(id, Errorf(code, "the server of %s could not read the request: %v", q.name, err)))
		}
		return nil
	}
	key, refused := s.trust.admit(env)
	if refused != nil {
		r.refuseUnread(q, msg.ID, raw, refused.code, refused.reason)
		return nil
	}
	if n := Metadata(env.Header).size(); n > MaxMetadataBytes {
		r.refuseUnread(q, msg.ID, raw, ResourceExhausted, fmt.Sprintf("request metadata is %d bytes, over the %d-byte limit (tunnel.MaxMetadataBytes)", n, MaxMetadataBytes))
		return nil
	}
	if env.Kind == wire.KindUnary && !q.keys.IsResponses(env.ReplyTo) {
		s.log.Error("rpr: reply-to is not a response stream of this service; dead-lettered", "request_id", env.ID, "reply_to", env.ReplyTo)
		r.deadLetter(q, msg.ID, raw, fmt.Sprintf("reply-to %q is not a response stream of %s", env.ReplyTo, q.name))
		return nil
	}
	req.entryID, req.raw, req.env, req.deadline, req.key, req.lent = msg.ID, raw, env, env.Deadline, key, msg.Lent
	if serviceName, methodName, _ := strings.Cut(env.Method, "/"); serviceName == q.name {
		req.method = q.methods[methodName]
	}
	req.denied = s.trust.authorize(req.caller(), env.Method, env.ID)
	if env.Kind == wire.KindAsync {
		req.state = q.stateKey(env.StateName())
		req.deadline = s.clock.toRedis(time.Now().Add(asyncTimeout(env, req.method)))
	}
	return req
}

// deadLetter moves an entry to the dead-letter stream with reason.
func (r *serveRun) deadLetter(q *queue, entryID, raw, reason string) {
	if len(raw) > unreadableKeepBytes {
		// Unreadable or refused, so never replayable as it is: what is
		// kept is for the operator to look at, not a copy of any size.
		reason += fmt.Sprintf(" (the entry was %d bytes; its first %d are kept)", len(raw), unreadableKeepBytes)
		raw = raw[:unreadableKeepBytes]
	}
	letter := wire.DeadLetter{Reason: reason, Code: InvalidArgument.String(), Worker: r.server.opts.WorkerID, Lane: r.server.opts.Lane}
	r.deadLetterEntry(q, entryID, raw, letter)
}

// unreadableKeepBytes bounds what the dead letter of an entry the server
// could not read or refused keeps of it: a 64 MiB garbage entry cost 80 MiB
// of Redis memory for good.
const unreadableKeepBytes = 64 << 10
