package tunnel

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/internal/xread"
)

// A client's response reader: one goroutine per response stream, handing
// each answer to its waiting call and each frame to its stream.

// readResponses is the one reader of one of s's response streams: it
// blocks on the stream and hands each response to its waiting call, and
// each frame to its stream. It reads through the client's consumer group
// without acknowledgements (deleting the stream wakes the read, which is
// how Close stops it), and after a failed read it reads again, by id,
// everything after the last entry it handled: entries a read lost with
// its connection are not skipped, and none is handled twice.
func (c *Client) readResponses(s *clientService, rs *responseStream) {
	defer c.wg.Done()
	backoff := newBackoff(50*time.Millisecond, 2*time.Second)
	var last streamID // the last entry handled
	handle := func(msgs []xread.Entry) {
		for _, msg := range msgs {
			id, ok := parseStreamID(msg.ID)
			if ok && !last.less(id) {
				continue // handled already (read again after a failed read)
			}
			c.deliver(s, rs, msg)
			last = id
		}
		rs.lastRead.Store(last.String()) // trimmed up to here by the next refresh
	}
	entries := xread.NewReader(c.rdb, store.ResponseGroup, c.opts.ID, rs.key, true)
	// Large answers are read into buffers given back by deliver, or by
	// the call once it read its answer.
	entries.LendBodies(&c.buffers)
	// One connection for every read (NewClient counts one per response
	// stream: see checkPool).
	entries.KeepConn()
	defer entries.Close()
	busy := false // the last read brought answers
	for c.ctx.Err() == nil {
		msgs, err := entries.Read(c.ctx, 256, responseBlock(entries, busy))
		busy = len(msgs) > 0
		switch {
		case err == nil:
			backoff.reset()
		case errors.Is(err, redis.Nil):
			continue // nothing within the block time
		case c.ctx.Err() != nil:
			return
		default:
			c.log.Warn("rpr: read response stream", "stream", rs.key, "error", err)
			if isMissingStream(err) {
				ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
				if err := c.createResponseStream(ctx, rs); err != nil {
					c.log.Warn("rpr: recreate response stream", "stream", rs.key, "error", err)
				}
				cancel()
			}
			backoff.wait(c.ctx)
			c.catchUp(rs, last, handle)
			continue
		}
		handle(msgs)
	}
}

// responseBlock is how long a response reader's next read waits for an
// answer: 5 s, unless answers are flowing (busy) and a raw read
// (xread.Reader) may not wait that long; then as long as it may, so that
// a busy reader reads raw replies, and an idle one reads every 5 s.
func responseBlock(r *xread.Reader, busy bool) time.Duration {
	const idle = 5 * time.Second
	if raw := r.MaxRawBlock(); busy && raw < idle && raw >= 100*time.Millisecond {
		return raw
	}
	return idle
}

// catchUp hands to handle every entry of rs after last: those a failed
// read may have taken with it.
func (c *Client) catchUp(rs *responseStream, last streamID, handle func([]xread.Entry)) {
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	from := "(" + last.String()
	for {
		msgs, err := c.rdb.XRangeN(ctx, rs.key, from, "+", 256).Result()
		if err != nil || len(msgs) == 0 {
			return
		}
		handle(xread.FromMessages(msgs))
		from = "(" + msgs[len(msgs)-1].ID
	}
}

// deliver decodes one response and hands it to the call waiting for it,
// or one frame to its stream.
//
// A response in a lent buffer (msg.Lent) is decoded with only its payload
// in the buffer, which goes back to Client.buffers once nothing reads the
// payload: at once unless a call takes the response, and then when the
// call has unmarshalled it. Frames and a stream's end keep theirs (their
// payloads wait for the stream's reader): the collector takes it.
func (c *Client) deliver(s *clientService, rs *responseStream, msg xread.Entry) {
	if raw, ok := msg.Value(wire.StreamField); ok {
		c.deliverFrame(s, rs, msg.ID, raw)
		return
	}
	raw, _ := msg.Value(wire.Field)
	var decoded wire.Response // on the stack: a waiting call copies it (see clientService.answer)
	resp := &decoded
	giveBack := msg.Lent // unless a call or a stream takes the response
	defer func() { c.buffers.PutAll(giveBack) }()
	if err := decodeResponse(raw, msg.Lent != nil, resp); err != nil {
		id, _ := wire.PeekReplyAddress([]byte(raw))
		c.log.Error("rpr: undecodable response", "stream", rs.key, "entry", msg.ID, "request_id", id, "error", err)
		if id != "" && c.identity == nil { // with Credentials, only a signed answer ends a call
			s.complete(id, callResult{err: Errorf(Internal, "%s [%s]: undecodable response from the server: %v", s.name, id, err)})
		}
		return
	}
	if err := c.authentic(resp); err != nil {
		c.log.Error("rpr: answer refused; the call waits for its real answer", "stream", rs.key, "entry", msg.ID, "request_id", resp.ID, "reason", err)
		return
	}
	if s.answer(resp, msg.Lent, &c.responses) {
		giveBack = nil // the call's now
		return
	}
	if cs := s.stream(resp.ID); cs != nil {
		kept := *resp // the stream keeps it
		cs.onEnd(&kept)
		giveBack = nil
		return
	}
	c.log.Debug("rpr: response for a call no longer waiting", "request_id", resp.ID)
}

// decodeResponse decodes raw into resp, with only the payload sharing
// raw's memory when raw is in a lent buffer. (Called directly, not
// through a func value, so that resp can stay on its caller's stack.)
func decodeResponse(raw string, lent bool, resp *wire.Response) error {
	if lent {
		return wire.DecodeResponseLentInto(raw, resp)
	}
	return wire.DecodeResponseStringInto(raw, resp)
}

// deliverFrame decodes the frames of one entry and hands each to its
// stream. A malformed frame breaks its stream; the frames before it still
// count.
func (c *Client) deliverFrame(s *clientService, rs *responseStream, entryID, raw string) {
	frames, err := wire.DecodeFramesString(raw)
	for _, f := range frames {
		if cs := s.stream(f.ID); cs != nil {
			cs.onFrame(f)
		} else {
			c.log.Debug("rpr: frame for a stream no longer open", "request_id", f.ID, "type", f.Type)
		}
	}
	if err == nil {
		return
	}
	id, _ := wire.PeekReplyAddress([]byte(raw))
	if len(frames) > 0 {
		id = frames[0].ID // one entry holds the frames of one stream
	}
	c.log.Error("rpr: undecodable stream frame", "stream", rs.key, "entry", entryID, "request_id", id, "error", err)
	if cs := s.stream(id); cs != nil {
		cs.fail(Errorf(Internal, "%s [%s]: the stream broke after this caller received %d messages: undecodable frame from the server: %v; the request may have had effects",
			cs.full(), id, cs.recv.received(), err), true)
	}
}
