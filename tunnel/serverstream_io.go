package tunnel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/internal/xread"
)

// A worker's streams hear from their callers through one inbox per shard
// it reads (store.Shard.Inbox), read by one goroutine whatever the number
// of streams, and the worker watches that their callers are still there.

// inboxTTL is how long a worker's inbox outlives the worker: it is
// renewed while the worker reads it.
const inboxTTL = time.Minute

// openInbox makes sure q's inbox exists and renews its expiry.
func (s *Server) openInbox(ctx context.Context, q *queue) error {
	inbox := q.keys.Inbox(s.opts.WorkerID)
	open := store.NewOpenInbox(inbox, inboxTTL)
	open.Use(s.dialect)
	store.Run(ctx, s.rdb, &open.Call)
	if err := open.Err(); err != nil {
		return fmt.Errorf("rpr: open the stream inbox %s: %w", inbox, err)
	}
	return nil
}

// inboxTrimBatch is how many handled entries the inbox reader lets pile
// up before it removes them (it also does every inboxTTL/4).
const inboxTrimBatch = 256

// readInbox hands the frames callers write to q's inbox to their streams,
// until ctx ends. It is the inbox's only reader: it reads by id after the
// last entry it handled, so a failed read is read again and nothing is
// skipped or handled twice; it removes handled entries in batches (XTRIM
// MINID), and reopens the inbox every inboxTTL/4, which renews its expiry
// and brings back an inbox Redis lost.
func (r *serveRun) readInbox(ctx context.Context, q *queue) {
	s := r.server
	inbox := q.keys.Inbox(s.opts.WorkerID)
	readCtx := context.WithoutCancel(ctx) // a read ends by its block time
	backoff := newBackoff(50*time.Millisecond, 2*time.Second)
	var last streamID // the last entry handled; 0-0 takes what is there
	untrimmed := 0
	renew := time.Now().Add(inboxTTL / 4)
	frames := xread.NewStreamReader(s.rdb, inbox)
	for ctx.Err() == nil {
		msgs, err := frames.ReadAfter(readCtx, last.String(), 512, time.Second)
		switch {
		case err == nil, errors.Is(err, redis.Nil):
			backoff.reset()
		case ctx.Err() != nil:
			return
		default:
			s.log.Warn("rpr: read stream inbox", "stream", inbox, "error", err)
			backoff.wait(ctx)
			continue
		}
		for _, msg := range msgs {
			r.deliverFrames(msg)
			if id, ok := parseStreamID(msg.ID); ok {
				last = id
			}
			untrimmed++
		}
		due := time.Now().After(renew)
		if untrimmed >= inboxTrimBatch || (due && untrimmed > 0) {
			after := streamID{last.ms, last.seq + 1}
			if err := s.rdb.XTrimMinID(readCtx, inbox, after.String()).Err(); err != nil && ctx.Err() == nil {
				s.log.Warn("rpr: remove handled frames from the stream inbox", "stream", inbox, "error", err)
			} else {
				untrimmed = 0
			}
		}
		if due {
			if err := s.openInbox(readCtx, q); err != nil && ctx.Err() == nil {
				s.log.Warn("rpr: renew the stream inbox", "error", err)
			}
			renew = time.Now().Add(inboxTTL / 4)
		}
	}
}

// deliverFrames decodes the frames of one inbox entry and hands each to
// its stream. A malformed frame breaks its stream (the frames before it
// still count); the entry's other frames are lost with it, and their
// stream sees the gap.
func (r *serveRun) deliverFrames(msg xread.Entry) {
	raw, _ := msg.Value(wire.StreamField)
	frames, err := wire.DecodeFramesString(raw)
	for _, f := range frames {
		if ss := r.streams.get(f.ID); ss != nil {
			ss.onFrame(f)
		}
	}
	if err == nil {
		return
	}
	r.server.log.Error("rpr: undecodable frame in the stream inbox; dropped", "entry", msg.ID, "error", err)
	if len(frames) > 0 {
		if ss := r.streams.get(frames[0].ID); ss != nil {
			ss.cancel(fmt.Errorf("rpr: the caller's side of the stream broke: undecodable frame: %w", err))
		}
	}
}

// callerSilence is how long a caller may go without renewing its response
// stream before a server takes it as gone and ends its streams: the
// caller renews it every wire.BeatInterval to responseStreamTTL.
const callerSilence = 6 * time.Second

// watchCallers ends the streams whose callers are gone, checking every
// wire.BeatInterval: one PTTL per caller with open streams here, however
// many streams it has.
func (r *serveRun) watchCallers(stop <-chan struct{}) {
	s := r.server
	t := time.NewTicker(wire.BeatInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		byCaller := map[string][]*serverStream{}
		for _, ss := range r.streams.list() {
			byCaller[ss.req.env.ReplyTo] = append(byCaller[ss.req.env.ReplyTo], ss)
		}
		if len(byCaller) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*wire.BeatInterval)
		pipe := s.rdb.Pipeline()
		ttls := map[string]*redis.DurationCmd{}
		for key := range byCaller {
			ttls[key] = pipe.PTTL(ctx, key)
		}
		_, _ = pipe.Exec(ctx)
		cancel()
		for key, cmd := range ttls {
			ttl, err := cmd.Result()
			// PTTL answers -2 (as a negative duration) for a missing key.
			if err != nil || ttl > responseStreamTTL-callerSilence {
				continue
			}
			for _, ss := range byCaller[key] {
				s.log.Info("rpr: a stream's caller is gone; cancelling its handler", "request_id", ss.req.env.ID, "reply_to", key)
				ss.cancel(errCallerGone)
			}
		}
	}
}
