package tunnel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// A worker's streams hear from their callers through one inbox per shard
// it reads (store.Shard.Inbox), read by one goroutine whatever the number
// of streams, and the worker watches that their callers are still there.

// inboxTTL is how long a worker's inbox outlives the worker: it is
// renewed while the worker reads it.
const inboxTTL = time.Minute

// openInbox makes sure q's inbox and its consumer group exist.
func (s *Server) openInbox(ctx context.Context, q *queue) error {
	inbox := q.keys.Inbox(s.opts.WorkerID)
	err := s.rdb.XGroupCreateMkStream(ctx, inbox, store.WorkersGroup, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("rpr: create the stream inbox %s: %w", inbox, err)
	}
	if err := s.rdb.PExpire(ctx, inbox, inboxTTL).Err(); err != nil {
		return fmt.Errorf("rpr: set the expiry of %s: %w", inbox, err)
	}
	return nil
}

// readInbox hands the frames callers write to q's inbox to their streams,
// until ctx ends, and removes them once handed over. After a failed read
// it first reads again what it had been given and not yet removed, so no
// frame is skipped.
func (r *serveRun) readInbox(ctx context.Context, q *queue) {
	s := r.server
	inbox := q.keys.Inbox(s.opts.WorkerID)
	readCtx := context.WithoutCancel(ctx)
	backoff := newBackoff(50*time.Millisecond, 2*time.Second)
	from := "0" // what this worker was given before, then new frames
	renew := time.Now().Add(inboxTTL / 4)
	for ctx.Err() == nil {
		streams, err := s.rdb.XReadGroup(readCtx, &redis.XReadGroupArgs{
			Group: store.WorkersGroup, Consumer: s.opts.WorkerID,
			Streams: []string{inbox, from}, Count: 512, Block: time.Second,
		}).Result()
		switch {
		case err == nil, errors.Is(err, redis.Nil):
			backoff.reset()
		case ctx.Err() != nil:
			return
		default:
			s.log.Warn("rpr: read stream inbox", "stream", inbox, "error", err)
			if isMissingStream(err) {
				if err := s.openInbox(readCtx, q); err != nil {
					s.log.Warn("rpr: recreate stream inbox", "error", err)
				}
			}
			from = "0"
			backoff.wait(ctx)
			continue
		}
		var ids []string
		for _, st := range streams {
			for _, msg := range st.Messages {
				r.deliverFrame(msg)
				ids = append(ids, msg.ID)
			}
		}
		if from == "0" && len(ids) == 0 {
			from = ">" // the earlier deliveries are all handed over
		}
		if len(ids) > 0 || time.Now().After(renew) {
			pipe := s.rdb.Pipeline()
			if len(ids) > 0 {
				pipe.XAck(readCtx, inbox, store.WorkersGroup, ids...)
				pipe.XDel(readCtx, inbox, ids...)
			}
			pipe.PExpire(readCtx, inbox, inboxTTL)
			if _, err := pipe.Exec(readCtx); err != nil && ctx.Err() == nil {
				s.log.Warn("rpr: remove read frames from the stream inbox; they are read again", "stream", inbox, "error", err)
				from = "0"
			}
			renew = time.Now().Add(inboxTTL / 4)
		}
	}
}

// deliverFrame decodes one inbox entry and hands it to its stream.
func (r *serveRun) deliverFrame(msg redis.XMessage) {
	raw, _ := msg.Values[wire.StreamField].(string)
	f, err := wire.DecodeFrameString(raw)
	if err != nil {
		r.server.log.Error("rpr: undecodable frame in the stream inbox; dropped", "entry", msg.ID, "error", err)
		return
	}
	if ss := r.streams.get(f.ID); ss != nil {
		ss.onFrame(f)
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
