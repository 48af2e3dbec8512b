package compare

// The plain Streams RPC's server with its handlers run concurrently, as
// an RPC server must run them: servePlainRPC runs a batch's requests one
// after the other on the goroutine that read them, so one handler that
// blocks holds up every request read with it. This one runs each request
// on a goroutine of its own, as gRPC-go does each stream, and hands its
// answer to one completer, which writes whatever finished meanwhile in
// one pipeline (the answers and one XACK), one pipeline in flight at a
// time, as rpr's completer does. It still has none of rpr's guarantees.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// plainConcurrency bounds the requests the concurrent plain server runs
// at once, as ChildServerConcurrency bounds rpr's.
const plainConcurrency = ChildServerConcurrency

// plainAnswer is one request's outcome on its way to the completer: out
// is nil for a request that could not be decoded, which is acknowledged
// without an answer.
type plainAnswer struct {
	entryID, replyTo, callID string
	out                      []byte
}

// servePlainConcurrent serves the plain echo on rdb until ctx ends, each
// request on a goroutine of its own.
func servePlainConcurrent(ctx context.Context, rdb *redis.Client) error {
	err := rdb.XGroupCreateMkStream(ctx, plainRequests, plainGroup, "$").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("concurrent plain RPC: creating group %s on %s: %w", plainGroup, plainRequests, err)
	}
	answers := make(chan plainAnswer, plainConcurrency)
	slots := make(chan struct{}, plainConcurrency) // a token per request running or being answered
	completed := make(chan struct{})
	go func() {
		defer close(completed)
		plainComplete(ctx, rdb, answers, slots)
	}()
	errs := make(chan error, plainWorkers)
	for w := range plainWorkers {
		go func() { errs <- plainReadConcurrent(ctx, rdb, "c"+strconv.Itoa(w), answers, slots) }()
	}
	var first error
	for range plainWorkers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	<-completed
	return first
}

// plainReadConcurrent reads batches of requests as consumer and starts
// each on a goroutine of its own, holding a slot, until ctx ends.
func plainReadConcurrent(ctx context.Context, rdb *redis.Client, consumer string, answers chan<- plainAnswer, slots chan struct{}) error {
	for ctx.Err() == nil {
		streams, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: plainGroup, Consumer: consumer, Streams: []string{plainRequests, ">"},
			Count: 64, Block: time.Second,
		}).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			return fmt.Errorf("concurrent plain RPC reader %s: read: %w", consumer, err)
		}
		for _, msg := range streams[0].Messages {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			go func() { answers <- plainHandle(msg) }()
		}
	}
	return nil
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

// plainComplete writes answers as they come, all that arrived while the
// previous pipeline was in flight in the next, and gives back their
// slots, until ctx ends.
func plainComplete(ctx context.Context, rdb *redis.Client, answers <-chan plainAnswer, slots <-chan struct{}) {
	batch := make([]plainAnswer, 0, plainConcurrency)
	ids := make([]string, 0, plainConcurrency)
	for {
		select {
		case a := <-answers:
			batch = append(batch[:0], a)
		case <-ctx.Done():
			return
		}
	fill:
		for len(batch) < plainConcurrency {
			select {
			case a := <-answers:
				batch = append(batch, a)
			default:
				break fill
			}
		}
		pipe := rdb.Pipeline()
		ids = ids[:0]
		for _, a := range batch {
			ids = append(ids, a.entryID)
			if a.out != nil {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: a.replyTo, MaxLen: 4096, Approx: true, Values: []any{"id", a.callID, "p", a.out}})
			}
		}
		pipe.XAck(ctx, plainRequests, plainGroup, ids...)
		_, _ = pipe.Exec(ctx) // a failed answer is a call that times out, which fails the run
		for range batch {
			<-slots
		}
	}
}
