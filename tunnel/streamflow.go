package tunnel

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
)

// The mechanics both sides of a stream share: a sender's flow-control
// window (sendWindow), a receiver's ordered buffer (recvBuffer), and the
// ordered writer of one direction's frames (frameSender). See
// wire.FrameAccept for the protocol.

// StreamWindow bounds how far a stream's sender may run ahead of its
// receiver: at most Messages messages, and Bytes bytes of them (one larger
// message when none is outstanding), sent and not yet consumed (RecvMsg).
// Redis holds no more than that of one direction of a stream.
type StreamWindow struct {
	Messages int
	Bytes    int64
}

// DefaultStreamWindow is the window each side grants its peer unless
// ClientOptions.StreamWindow or ServerOptions.StreamWindow say otherwise.
var DefaultStreamWindow = StreamWindow{Messages: 64, Bytes: 1 << 20}

// orDefault fills in w's zero fields from DefaultStreamWindow.
func (w StreamWindow) orDefault() StreamWindow {
	if w.Messages <= 0 {
		w.Messages = DefaultStreamWindow.Messages
	}
	if w.Bytes <= 0 {
		w.Bytes = DefaultStreamWindow.Bytes
	}
	return w
}

// signal is a broadcast: wait returns a channel closed at the next notify.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// sendWindow is a sender's flow-control state for one direction of a
// stream: what the receiver granted and last reported consumed, and what
// was sent.
type sendWindow struct {
	mu                      sync.Mutex
	window                  int64 // messages; 0 until granted
	windowBytes             int64
	sent, sentBytes         int64
	consumed, consumedBytes int64
	err                     error // the stream ended
	changed                 signal
	// blocked tells the receiver that a message waits for credit
	// (wire.FrameBlocked); blockedAt is the sent count it last did so at,
	// so that it says so once per wait.
	blocked   func(size int)
	blockedAt int64
}

// newSendWindow returns a window not granted yet; blocked is called when
// a message waits on the bytes the receiver has not reported consumed.
func newSendWindow(blocked func(size int)) *sendWindow {
	return &sendWindow{blocked: blocked, blockedAt: -1}
}

// grant records the receiver's window.
func (w *sendWindow) grant(messages int, bytes int64) {
	w.mu.Lock()
	w.window, w.windowBytes = int64(messages), bytes
	w.mu.Unlock()
	w.changed.notify()
}

// credit records the receiver's consumption (cumulative; an older credit
// arriving late changes nothing).
func (w *sendWindow) credit(consumed, bytes int64) {
	w.mu.Lock()
	w.consumed, w.consumedBytes = max(w.consumed, consumed), max(w.consumedBytes, bytes)
	w.mu.Unlock()
	w.changed.notify()
}

// fail ends the window: senders waiting in reserve get err.
func (w *sendWindow) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.changed.notify()
}

// take counts one message of size as sent without waiting (the message a
// stream's open carries) and returns its number.
func (w *sendWindow) take(size int) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sent++
	w.sentBytes += int64(size)
	return w.sent
}

// reserve waits until one message of size may be sent under the window,
// while ctx allows, and returns its number. A message held back by bytes
// alone tells the receiver (once per wait), which credits as soon as
// what it consumed lets it go: the receiver's usual credit, every half
// window, may never come for a large message behind small ones.
func (w *sendWindow) reserve(ctx context.Context, size int) (int64, error) {
	for {
		changed := w.changed.wait()
		w.mu.Lock()
		if w.err != nil {
			err := w.err
			w.mu.Unlock()
			return 0, err
		}
		outstanding, outBytes := w.sent-w.consumed, w.sentBytes-w.consumedBytes
		if w.window > 0 && outstanding < w.window && (outstanding == 0 || outBytes+int64(size) <= w.windowBytes) {
			w.sent++
			w.sentBytes += int64(size)
			seq := w.sent
			w.mu.Unlock()
			return seq, nil
		}
		tell := w.window > 0 && outstanding < w.window && w.blockedAt != w.sent && w.blocked != nil
		if tell {
			w.blockedAt = w.sent
		}
		w.mu.Unlock()
		if tell {
			w.blocked(size)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// sentCount returns how many messages were sent.
func (w *sendWindow) sentCount() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sent
}

// recvBuffer is a receiver's side of one direction of a stream: the
// messages received in order and not yet consumed, how the direction
// ended, and the credits owed to the sender.
type recvBuffer struct {
	mu          sync.Mutex
	window      int64 // what this side granted
	windowBytes int64
	next        int64    // the number of the message expected next
	queue       [][]byte // received, not consumed
	queuedBytes int64
	closedAt    int64 // how many messages the sender sent in all; -1 while it may send more
	end         error // how the direction ended, once it did (io.EOF: cleanly)
	receivedB   int64 // bytes of every message received
	consumed    int64
	consumedB   int64
	credited    int64 // consumption last reported to the sender
	creditedB   int64
	// owedAt is the consumption, in bytes, at which a blocked sender's
	// message fits its window (wire.FrameBlocked); -1 when none waits.
	owedAt  int64
	arrived signal
}

func newRecvBuffer(w StreamWindow) *recvBuffer {
	return &recvBuffer{window: int64(w.Messages), windowBytes: w.Bytes, next: 1, closedAt: -1, owedAt: -1}
}

// errStreamOverrun is a sender that ran past the window it was granted.
var errStreamOverrun = errors.New("the peer sent past its flow-control window")

// push adds message seq. A message already received is dropped (a resend
// after a lost reply); a gap means messages were lost, which ends the
// direction with an error.
func (b *recvBuffer) push(seq int64, payload []byte) error {
	b.mu.Lock()
	defer b.arrived.notify()
	defer b.mu.Unlock()
	switch {
	case b.end != nil:
		return nil
	case seq < b.next:
		return nil // a duplicate
	case seq > b.next:
		err := fmt.Errorf("messages %d to %d of the stream were lost in Redis (a failover to a replica that had not received them, or a restart that lost its last writes)", b.next, seq-1)
		b.end = err
		return err
	case int64(len(b.queue)) >= 2*b.window+1:
		b.end = errStreamOverrun
		return errStreamOverrun
	}
	b.next++
	b.queue = append(b.queue, payload)
	b.queuedBytes += int64(len(payload))
	b.receivedB += int64(len(payload))
	return nil
}

// blocked records that the sender waits to send a message of size bytes,
// having sent every message received so far (frames arrive in order). It
// returns the credit to send at once when what was consumed already lets
// the message go; otherwise pop returns it when that much is.
func (b *recvBuffer) blocked(size int64) *credit {
	b.mu.Lock()
	defer b.mu.Unlock()
	// The sender may send once what it has outstanding plus size fits
	// the window, or once nothing is outstanding.
	need := min(b.receivedB+size-b.windowBytes, b.receivedB)
	switch {
	case need <= b.creditedB:
		return nil // a credit on its way already lets it go
	case b.consumedB >= need:
		b.credited, b.creditedB = b.consumed, b.consumedB
		return &credit{b.consumed, b.consumedB}
	}
	b.owedAt = need
	return nil
}

// closeAfter records that the sender sent n messages in all.
func (b *recvBuffer) closeAfter(n int64) {
	b.mu.Lock()
	if b.closedAt < 0 {
		b.closedAt = n
	}
	b.mu.Unlock()
	b.arrived.notify()
}

// finish ends the direction with err (io.EOF: cleanly) once the messages
// already queued are consumed; a direction already ended keeps its end.
func (b *recvBuffer) finish(err error) {
	b.mu.Lock()
	if b.end == nil {
		b.end = err
	}
	b.mu.Unlock()
	b.arrived.notify()
}

// credit is consumption to report to the sender.
type credit struct{ consumed, bytes int64 }

// pop waits for the next message while ctx allows. It returns the message,
// or the direction's end once every message before it was consumed, and a
// credit to send when half a window has been consumed since the last one.
func (b *recvBuffer) pop(ctx context.Context) ([]byte, *credit, error) {
	for {
		arrived := b.arrived.wait()
		b.mu.Lock()
		if len(b.queue) > 0 {
			m := b.queue[0]
			b.queue[0] = nil
			b.queue = b.queue[1:]
			b.queuedBytes -= int64(len(m))
			b.consumed++
			b.consumedB += int64(len(m))
			var c *credit
			owed := b.owedAt >= 0 && b.consumedB >= b.owedAt
			if owed || b.consumed-b.credited >= max(b.window/2, 1) || b.consumedB-b.creditedB >= max(b.windowBytes/2, 1) {
				b.credited, b.creditedB = b.consumed, b.consumedB
				b.owedAt = -1
				c = &credit{b.consumed, b.consumedB}
			}
			b.mu.Unlock()
			return m, c, nil
		}
		if b.end != nil {
			err := b.end
			b.mu.Unlock()
			return nil, nil, err
		}
		if b.closedAt >= 0 && b.consumed >= b.closedAt {
			b.mu.Unlock()
			return nil, nil, errEndOfStream
		}
		b.mu.Unlock()
		select {
		case <-arrived:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// received returns how many messages were consumed.
func (b *recvBuffer) received() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.consumed
}

// errEndOfStream is a direction that its sender closed and whose messages
// were all consumed; callers turn it into io.EOF.
var errEndOfStream = errors.New("end of stream")

// frameSender writes one direction's frames of one stream to the
// receiver's stream, in order: one XADD at a time per stream carries, as
// one entry, every frame queued meanwhile, so a busy stream sends in
// batches and a quiet one at once. Sending never waits for Redis: the
// batcher's flusher writes the entry while the stream queues the next
// frames. A failed write is sent again (a frame that did arrive is then
// dropped as a duplicate by its receiver), with backoff, until the
// stream's context ends.
type frameSender struct {
	to      string
	rdb     redis.UniversalClient
	batcher *batcher
	ctx     context.Context // the stream's; ends retries
	gone    func()          // the receiver's stream no longer exists

	mu       sync.Mutex
	pending  [][]byte
	inFlight bool
	err      error
	drained  signal
	backoff  time.Duration
}

func newFrameSender(ctx context.Context, client redis.UniversalClient, b *batcher, to string, gone func()) *frameSender {
	return &frameSender{to: to, rdb: client, batcher: b, ctx: ctx, gone: gone}
}

// send queues frame behind those already queued.
func (s *frameSender) send(frame []byte) error {
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	s.pending = append(s.pending, frame)
	start := !s.inFlight
	s.inFlight = true
	s.mu.Unlock()
	if start {
		s.flush()
	}
	return nil
}

// flush sends every queued frame in one entry. Only one runs at a time
// (inFlight).
func (s *frameSender) flush() {
	s.mu.Lock()
	frames := s.pending
	s.pending = nil
	s.mu.Unlock()
	op := &sendFramesOp{sender: s, frames: frames, call: store.NewSendFrames(s.to, frames)}
	op.command = op
	if err := s.batcher.enqueue(context.WithoutCancel(s.ctx), &op.pipelineOp); err != nil {
		s.done(frames, err)
	}
}

// done handles the outcome of one run: on to the next batch, or the same
// frames again after a failure.
func (s *frameSender) done(frames [][]byte, err error) {
	s.mu.Lock()
	switch {
	case err != nil && s.ctx.Err() == nil:
		s.pending = append(frames, s.pending...)
		s.backoff = min(max(2*s.backoff, 20*time.Millisecond), time.Second)
		wait := s.backoff
		s.mu.Unlock()
		time.AfterFunc(wait, s.flush)
		return
	case err != nil:
		s.err = fmt.Errorf("stream frames not sent: %w", err)
	}
	s.backoff = 0
	if len(s.pending) > 0 && s.err == nil {
		s.mu.Unlock()
		// Not on this goroutine: it may be the batcher's flusher, which must
		// not wait for room in its own queue.
		go s.flush()
		return
	}
	s.inFlight = false
	s.mu.Unlock()
	s.drained.notify()
}

// drain waits until every frame queued so far has been written, while ctx
// allows.
func (s *frameSender) drain(ctx context.Context) error {
	for {
		drained := s.drained.wait()
		s.mu.Lock()
		idle, err := !s.inFlight && len(s.pending) == 0, s.err
		s.mu.Unlock()
		if err != nil {
			return err
		}
		if idle {
			return nil
		}
		select {
		case <-drained:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// sendFramesOp is one entry of frames, waiting in a batcher.
type sendFramesOp struct {
	pipelineOp
	sender *frameSender
	frames [][]byte
	call   *store.SendFrames
}

func (op *sendFramesOp) queue(ctx context.Context, c commandSink) redis.Cmder {
	return op.call.Queue(ctx, c)
}

func (op *sendFramesOp) finished(redis.Cmder) {
	n, err := op.call.Result()
	if err == nil && n == store.CallerGone {
		op.sender.mu.Lock()
		op.sender.err = errors.New("the receiver's stream is gone")
		op.sender.mu.Unlock()
		go op.sender.gone()
	}
	op.sender.done(op.frames, err)
}

// streamID is a Redis stream entry id, for ordering entries.
type streamID struct{ ms, seq uint64 }

// parseStreamID reads "ms-seq".
func parseStreamID(s string) (streamID, bool) {
	msText, seqText, ok := strings.Cut(s, "-")
	if !ok {
		return streamID{}, false
	}
	ms, err1 := strconv.ParseUint(msText, 10, 64)
	seq, err2 := strconv.ParseUint(seqText, 10, 64)
	return streamID{ms, seq}, err1 == nil && err2 == nil
}

func (a streamID) less(b streamID) bool { return a.ms < b.ms || (a.ms == b.ms && a.seq < b.seq) }

func (a streamID) String() string {
	return strconv.FormatUint(a.ms, 10) + "-" + strconv.FormatUint(a.seq, 10)
}
