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

	"github.com/redis/go-redis/v9"
)

// plainConcurrency bounds the requests the concurrent plain server runs
// at once, as ChildServerConcurrency bounds rpr's.
const plainConcurrency = ChildServerConcurrency

// servePlainConcurrent serves the plain echo on rdb until ctx ends, each
// request on a goroutine of its own.
func servePlainConcurrent(ctx context.Context, rdb *redis.Client) error {
	return servePlainConcurrentWith(ctx, rdb, plainAnswerAll)
}

// answerWriter writes a batch of answers and acknowledges their requests.
type answerWriter func(ctx context.Context, rdb *redis.Client, answers []plainAnswer) error

// servePlainConcurrentWith serves the plain echo on rdb until ctx ends,
// each request on a goroutine of its own, writing answers with write.
func servePlainConcurrentWith(ctx context.Context, rdb *redis.Client, write answerWriter) error {
	answers := make(chan plainAnswer, plainConcurrency)
	slots := make(chan struct{}, plainConcurrency) // a token per request running or being answered
	completed := make(chan struct{})
	go func() {
		defer close(completed)
		plainComplete(ctx, rdb, write, answers, slots)
	}()
	err := servePlain(ctx, rdb, func(ctx context.Context, rdb *redis.Client, consumer string) error {
		return plainReadConcurrent(ctx, rdb, consumer, answers, slots)
	})
	<-completed // ends with ctx, as the readers do
	return err
}

// plainReadConcurrent reads batches of requests as consumer and starts
// each on a goroutine of its own, holding a slot, until ctx ends.
func plainReadConcurrent(ctx context.Context, rdb *redis.Client, consumer string, answers chan<- plainAnswer, slots chan struct{}) error {
	for ctx.Err() == nil {
		msgs, err := plainRead(ctx, rdb, consumer)
		if err != nil {
			return err
		}
		for _, msg := range msgs {
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

// plainComplete writes answers as they come, all that arrived while the
// previous pipeline was in flight in the next, and gives back their
// slots, until ctx ends.
func plainComplete(ctx context.Context, rdb *redis.Client, write answerWriter, answers <-chan plainAnswer, slots <-chan struct{}) {
	batch := make([]plainAnswer, 0, plainConcurrency)
	for {
		var ok bool
		if batch, ok = nextBatch(ctx, answers, batch, plainConcurrency); !ok {
			return
		}
		_ = write(ctx, rdb, batch) // a failed answer is a call that times out, which fails the run
		for range batch {
			<-slots
		}
	}
}
