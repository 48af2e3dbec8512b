package store

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/wire"
)

// acceptScript hands a streaming call to the worker that claimed it: it
// retires the open's request entry (the stream is the worker's now and is
// never taken over: a broken stream is the caller's to redo), gives the
// state hash the stream's lifetime, and writes the accept frame to the
// caller's stream (NOMKSTREAM: nothing is created for a caller that is
// gone).
//
//	KEYS[1] request stream   KEYS[2] state hash   KEYS[3] reply stream
//	ARGV[1] consumer group   ARGV[2] entry id   ARGV[3] state TTL ms
//	ARGV[4] the accept frame
//
// Returns 1 when the caller's stream took the frame, 0 when it is gone.
var acceptScript = newScript("accept_stream", `
retire_entries(KEYS[1], ARGV[1], {ARGV[2]})
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if redis.call('XADD', KEYS[3], 'NOMKSTREAM', '*', 's', ARGV[4]) then return 1 end
return 0
`)

// AcceptStream hands a claimed streaming call to its worker and tells the
// caller.
type AcceptStream struct {
	Call
}

// NewAcceptStream retires the open entryID of stream, keeps the call's
// state for ttl, and writes frame (an encoded wire.FrameAccept) to the
// caller's stream replyTo.
func NewAcceptStream(stream, entryID, state, replyTo string, ttl time.Duration, frame []byte) *AcceptStream {
	return &AcceptStream{Call: Call{script: acceptScript,
		keys: []string{stream, state, replyTo},
		args: []any{WorkersGroup, entryID, ttlMillis(ttl), frame}}}
}

// Result returns Written, or CallerGone when the caller's stream is gone.
func (a *AcceptStream) Result() (int64, error) {
	out, err := a.Call.reply()
	if err != nil {
		return 0, err
	}
	n, _ := out.(int64)
	return n, nil
}

// endStreamScript ends a streaming call: it records the final state, the
// Response (for rpr trace; a stream's carries no payload) and how many
// messages went each way, and writes the Response
// (status, trailer) to the caller's stream. Unlike the complete script it
// is not fenced: an accepted stream has one worker for good.
//
//	KEYS[1] state hash   KEYS[2] reply stream
//	ARGV[1] final state   ARGV[2] state TTL ms   ARGV[3] response envelope
//	ARGV[4] messages the server sent   ARGV[5] messages it received
//
// Returns 1 when written, 0 when the caller's stream is gone.
var endStreamScript = newScript("end_stream", `
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'done_ms', now_ms(), 'lease', 0,
  'resp', ARGV[3], 'sent', ARGV[4], 'received', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if redis.call('XADD', KEYS[2], 'NOMKSTREAM', '*', 'e', ARGV[3]) then return 1 end
return 0
`)

// EndStream records how a streaming call ended and tells its caller.
type EndStream struct {
	Call
}

// NewEndStream records final (wire.StateSuccess or wire.StateFailed) in
// state, with the messages the server sent and received, kept for ttl, and
// writes resp (an encoded wire.Response) to the caller's stream replyTo.
func NewEndStream(state, replyTo, final string, ttl time.Duration, resp []byte, sent, received int64) *EndStream {
	return &EndStream{Call: Call{script: endStreamScript,
		keys: []string{state, replyTo},
		args: []any{final, ttlMillis(ttl), resp, sent, received}}}
}

// Result returns Written, or CallerGone when the caller's stream is gone.
func (e *EndStream) Result() (int64, error) {
	out, err := e.Call.reply()
	if err != nil {
		return 0, err
	}
	n, _ := out.(int64)
	return n, nil
}

// SendFrames writes frames of one streaming call, in order, to their
// receiver's stream (the caller's response stream or the worker's inbox)
// as one entry: one XADD however many frames a sender had queued.
// NOMKSTREAM: nothing is created for a receiver that is gone.
type SendFrames struct {
	args redis.XAddArgs
	cmd  *redis.StringCmd
}

// NewSendFrames writes frames (each an encoded wire.Frame), in order, to
// the stream to.
func NewSendFrames(to string, frames [][]byte) *SendFrames {
	return &SendFrames{args: redis.XAddArgs{Stream: to, NoMkStream: true,
		Values: []any{wire.StreamField, joinFrames(frames)}}}
}

// Queue adds the XADD to c, a client or a pipeline.
func (s *SendFrames) Queue(ctx context.Context, c redis.Cmdable) redis.Cmder {
	s.cmd = c.XAdd(ctx, &s.args)
	return s.cmd
}

// Result returns Written, or CallerGone when the receiver's stream is gone.
func (s *SendFrames) Result() (int64, error) {
	switch err := s.cmd.Err(); {
	case errors.Is(err, redis.Nil):
		return CallerGone, nil
	case err != nil:
		return 0, err
	}
	return Written, nil
}

// openInboxScript makes sure a worker's inbox exists, without touching
// the frames it holds, and (re)sets its expiry: the worker runs it when
// it starts and whenever the inbox is due for renewal, so an inbox lost
// to a restart or an expiry comes back. XADD with MAXLEN 0 leaves an
// empty stream: the key the callers' XADD NOMKSTREAM writes to.
//
//	KEYS[1] the inbox   ARGV[1] TTL ms
var openInboxScript = newOOMScript("open_inbox", `
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('XADD', KEYS[1], 'MAXLEN', '0', '*', 'created', '1')
end
return redis.call('PEXPIRE', KEYS[1], ARGV[1])
`)

// OpenInbox creates a worker's inbox if need be and renews its expiry.
type OpenInbox struct {
	Call
}

// NewOpenInbox makes sure inbox exists and expires after ttl unless
// opened again.
func NewOpenInbox(inbox string, ttl time.Duration) *OpenInbox {
	return &OpenInbox{Call: Call{script: openInboxScript, keys: []string{inbox},
		args: []any{ttlMillis(ttl)}}}
}

// Err returns the run's error.
func (o *OpenInbox) Err() error {
	_, err := o.Call.reply()
	return err
}

// joinFrames returns frames as one value: the frame itself when there is
// one (the common case of a quiet stream), without copying it again.
func joinFrames(frames [][]byte) []byte {
	if len(frames) == 1 {
		return frames[0]
	}
	return bytes.Join(frames, nil)
}
