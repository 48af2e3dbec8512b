package compare

// The plain Streams RPC: the least a request/reply over Redis Streams
// can be, as issue 18 describes its hand-written reference (per-client
// response streams, one XREADGROUP COUNT 64 per worker batch, one
// pipeline of answers and a multi-id XACK). It has none of rpr's
// guarantees (no deadlines, states, retries or fencing); it is here as
// the floor a figure of rpr's is read against, chiefly how Redis's CPU
// per call grows with client instances when nothing but the shape of the
// traffic changes.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	plainRequests = "plainrpc:requests"
	plainGroup    = "plainrpc"
	// plainWorkers is how many batch readers the plain server runs.
	plainWorkers = 2
	// plainMaxBatch bounds one client instance's pipeline of requests,
	// as rpr's writer bounds its batches.
	plainMaxBatch = 512
)

// servePlainRPC serves the plain echo on rdb until ctx ends: each worker
// reads a batch, echoes every request to the reply stream it names, and
// acknowledges the batch, all answers and the XACK in one pipeline.
func servePlainRPC(ctx context.Context, rdb *redis.Client) error {
	return servePlain(ctx, rdb, plainWorker)
}

// servePlain creates the plain RPC's consumer group and runs plainWorkers
// goroutines of work, each a consumer of its own, until they all return;
// it returns the first error.
func servePlain(ctx context.Context, rdb *redis.Client, work func(ctx context.Context, rdb *redis.Client, consumer string) error) error {
	err := rdb.XGroupCreateMkStream(ctx, plainRequests, plainGroup, "$").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("plain RPC: creating group %s on %s: %w", plainGroup, plainRequests, err)
	}
	errs := make(chan error, plainWorkers)
	for w := range plainWorkers {
		go func() { errs <- work(ctx, rdb, "w"+strconv.Itoa(w)) }()
	}
	var first error
	for range plainWorkers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// plainWorker runs each batch it reads one request after the other, then
// answers the batch.
func plainWorker(ctx context.Context, rdb *redis.Client, consumer string) error {
	var answers []plainAnswer
	for ctx.Err() == nil {
		msgs, err := plainRead(ctx, rdb, consumer)
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			continue // the block ran out, or ctx ended
		}
		answers = answers[:0]
		for _, msg := range msgs {
			answers = append(answers, plainHandle(msg))
		}
		if err := plainAnswerAll(ctx, rdb, answers); err != nil && ctx.Err() == nil {
			return fmt.Errorf("plain RPC worker %s: answer: %w", consumer, err)
		}
	}
	return nil
}

// plainRead reads the next batch of requests for consumer: none when the
// read's block ran out or ctx ended.
func plainRead(ctx context.Context, rdb *redis.Client, consumer string) ([]redis.XMessage, error) {
	streams, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: plainGroup, Consumer: consumer, Streams: []string{plainRequests, ">"},
		Count: 64, Block: time.Second,
	}).Result()
	switch {
	case errors.Is(err, redis.Nil), err != nil && ctx.Err() != nil:
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("plain RPC %s: read: %w", consumer, err)
	}
	return streams[0].Messages, nil
}

// plainAnswer is one request's outcome: out is nil for a request that
// could not be decoded, which is acknowledged without an answer.
type plainAnswer struct {
	entryID, replyTo, callID string
	out                      []byte
}

// plainHandle decodes one request and encodes its echo, as a handler
// would.
func plainHandle(msg redis.XMessage) plainAnswer {
	a := plainAnswer{entryID: msg.ID}
	a.replyTo, _ = msg.Values["r"].(string)
	a.callID, _ = msg.Values["id"].(string)
	raw, _ := msg.Values["p"].(string)
	var in wrapperspb.BytesValue
	if a.replyTo != "" && proto.Unmarshal([]byte(raw), &in) == nil {
		a.out, _ = proto.Marshal(&in)
	}
	return a
}

// plainAnswerAll writes answers to their reply streams and acknowledges
// their entries, in one pipeline.
func plainAnswerAll(ctx context.Context, rdb *redis.Client, answers []plainAnswer) error {
	pipe := rdb.Pipeline()
	ids := make([]string, 0, len(answers))
	for _, a := range answers {
		ids = append(ids, a.entryID)
		if a.out != nil {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: a.replyTo, MaxLen: 4096, Approx: true, Values: []any{"id", a.callID, "p", a.out}})
		}
	}
	pipe.XAck(ctx, plainRequests, plainGroup, ids...)
	_, err := pipe.Exec(ctx)
	return err
}

// PlainClients are client instances of the plain Streams RPC, each with
// its own connections, reply stream, reader and pipelining sender.
type PlainClients struct {
	instances []*plainInstance
}

// StartPlainClients opens n plain client instances through the Redis at
// redisURL. With pushed, each takes its answers from a subscription
// (the "plainpush" server's) instead of reading its reply stream.
func StartPlainClients(ctx context.Context, redisURL string, n int, pushed bool) (*PlainClients, error) {
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("plain RPC clients: %w", err)
	}
	c := &PlainClients{}
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range n {
		inst, err := startPlainInstance(ctx, redis.NewClient(opts), "plainrpc:reply:"+tag+":"+strconv.Itoa(i), pushed)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.instances = append(c.instances, inst)
	}
	return c, nil
}

// Call makes one echo call of in on instance worker mod the count.
func (c *PlainClients) Call(ctx context.Context, worker int, in *wrapperspb.BytesValue) error {
	return c.instances[worker%len(c.instances)].call(ctx, in)
}

// WaitServed makes one call on every instance, each within 15s.
func (c *PlainClients) WaitServed(ctx context.Context) error {
	for i, inst := range c.instances {
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := inst.call(ctx, wrapperspb.Bytes([]byte("ready?")))
		cancel()
		if err != nil {
			return fmt.Errorf("plain RPC server does not answer client instance %d: %w", i, err)
		}
	}
	return nil
}

// Close stops every instance, deletes its reply stream and closes its
// connections.
func (c *PlainClients) Close() {
	for _, inst := range c.instances {
		inst.close()
	}
	c.instances = nil
}

type plainInstance struct {
	rdb    *redis.Client
	reply  string
	sends  chan *plainCall
	pushed *redis.PubSub // the subscription answers come on, if pushed
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	next   atomic.Uint64

	mu      sync.Mutex
	waiting map[string]*plainCall
}

// plainCall is one call in flight; done receives its outcome once.
type plainCall struct {
	id, payload string
	done        chan plainResult
}

type plainResult struct {
	payload string
	err     error
}

// startPlainInstance starts an instance answered on reply, read as a
// stream or, when pushed, from its subscription to the channel of that
// name.
func startPlainInstance(ctx context.Context, rdb *redis.Client, reply string, pushed bool) (*plainInstance, error) {
	p := &plainInstance{rdb: rdb, reply: reply, sends: make(chan *plainCall, 4096), waiting: map[string]*plainCall{}}
	if pushed {
		sub, err := subscribePushed(ctx, rdb, reply)
		if err != nil {
			_ = rdb.Close()
			return nil, err
		}
		p.pushed = sub
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(2)
	go p.send()
	if p.pushed != nil {
		go p.readPushed()
	} else {
		go p.read()
	}
	return p, nil
}

func (p *plainInstance) call(ctx context.Context, in *wrapperspb.BytesValue) error {
	raw, err := proto.Marshal(in)
	if err != nil {
		return err
	}
	c := &plainCall{id: strconv.FormatUint(p.next.Add(1), 10), payload: string(raw), done: make(chan plainResult, 1)}
	p.mu.Lock()
	p.waiting[c.id] = c
	p.mu.Unlock()
	select {
	case p.sends <- c:
	case <-ctx.Done():
		p.take(c.id)
		return ctx.Err()
	}
	select {
	case res := <-c.done:
		if res.err != nil {
			return res.err
		}
		return proto.Unmarshal([]byte(res.payload), new(wrapperspb.BytesValue))
	case <-ctx.Done():
		p.take(c.id)
		return ctx.Err()
	}
}

// take removes and returns the call waiting under id, nil when none is.
func (p *plainInstance) take(id string) *plainCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.waiting[id]
	delete(p.waiting, id)
	return c
}

// send writes whatever calls are queued as one pipeline of XADDs, one
// pipeline in flight at a time.
func (p *plainInstance) send() {
	defer p.wg.Done()
	batch := make([]*plainCall, 0, plainMaxBatch)
	for {
		var ok bool
		if batch, ok = nextBatch(p.ctx, p.sends, batch, plainMaxBatch); !ok {
			return
		}
		pipe := p.rdb.Pipeline()
		for _, c := range batch {
			pipe.XAdd(p.ctx, &redis.XAddArgs{Stream: plainRequests, MaxLen: 100_000, Approx: true,
				Values: []any{"r", p.reply, "id", c.id, "p", c.payload}})
		}
		if _, err := pipe.Exec(p.ctx); err != nil {
			for _, c := range batch {
				if w := p.take(c.id); w != nil {
					w.done <- plainResult{err: fmt.Errorf("plain RPC: send: %w", err)}
				}
			}
		}
	}
}

// read hands each answer on the reply stream to its waiting call.
func (p *plainInstance) read() {
	defer p.wg.Done()
	last := "0-0" // the stream is new: nothing on it is missed
	for p.ctx.Err() == nil {
		streams, err := p.rdb.XRead(p.ctx, &redis.XReadArgs{Streams: []string{p.reply, last}, Count: 256, Block: 5 * time.Second}).Result()
		if err != nil {
			if !errors.Is(err, redis.Nil) && p.ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond) // a broken connection: read again
			}
			continue
		}
		for _, msg := range streams[0].Messages {
			last = msg.ID
			id, _ := msg.Values["id"].(string)
			payload, _ := msg.Values["p"].(string)
			p.answer(id, payload)
		}
	}
}

// answer hands payload to the call waiting under id, if one is.
func (p *plainInstance) answer(id, payload string) {
	if c := p.take(id); c != nil {
		c.done <- plainResult{payload: payload}
	}
}

// close stops the sender and the reader (closing the connections ends
// the reader's blocked read) and deletes the reply stream.
func (p *plainInstance) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = p.rdb.Del(ctx, p.reply).Err()
	cancel()
	p.cancel()
	if p.pushed != nil {
		_ = p.pushed.Close() // ends readPushed's receive
	}
	_ = p.rdb.Close()
	p.wg.Wait()
}

// nextBatch waits for one item on ch, then takes into batch[:0] whatever
// else is queued, up to limit items, without waiting: whatever arrived while
// the previous batch was being written. ok is false when ctx ended first.
func nextBatch[T any](ctx context.Context, ch <-chan T, batch []T, limit int) (_ []T, ok bool) {
	select {
	case item := <-ch:
		batch = append(batch[:0], item)
	case <-ctx.Done():
		return batch, false
	}
	for len(batch) < limit {
		select {
		case item := <-ch:
			batch = append(batch, item)
		default:
			return batch, true
		}
	}
	return batch, true
}
