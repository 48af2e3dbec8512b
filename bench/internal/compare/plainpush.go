package compare

// The plain Streams RPC with its answers pushed: what a push design of
// rpr's answers would leave to measure against. The server is the
// concurrent one (servePlainConcurrent), and each batch of answers is one
// script that still adds every answer to its reply stream, the durable
// record a client would read again after its subscription broke, and
// publishes the entry's id and the answer on a channel of the stream's
// name; the client instances read their subscriptions and never read
// their streams. What a client no longer issues is the blocking read it
// makes again after each batch of answers, one round trip in a few
// calls.
//
// A real client would also have to read its stream after a broken
// subscription (everything after the last id it was pushed) and while a
// server that does not publish serves it; these runs break nothing and
// every server publishes, so none of that is here.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// pushAnswers adds each answer to its reply stream (KEYS[i]: the call's
// id ARGV[2i-1] and payload ARGV[2i]) and publishes the entry's id, the
// call's and the payload, NUL-separated, on the channel of the stream's
// name.
var pushAnswers = redis.NewScript(`
for i = 1, #KEYS do
  local entry = redis.call('XADD', KEYS[i], 'MAXLEN', '~', 4096, '*', 'id', ARGV[2*i-1], 'p', ARGV[2*i])
  redis.call('PUBLISH', KEYS[i], entry .. '\0' .. ARGV[2*i-1] .. '\0' .. ARGV[2*i])
end
return #KEYS`)

// servePlainPushed serves the plain echo on rdb until ctx ends, each
// request on a goroutine of its own, its answer pushed.
func servePlainPushed(ctx context.Context, rdb *redis.Client) error {
	if err := pushAnswers.Load(ctx, rdb).Err(); err != nil {
		return fmt.Errorf("plain RPC, pushed: loading its script: %w", err)
	}
	return servePlainConcurrentWith(ctx, rdb, plainAnswerPushed)
}

// plainAnswerPushed writes and publishes answers with pushAnswers and
// acknowledges their requests, in one pipeline.
func plainAnswerPushed(ctx context.Context, rdb *redis.Client, answers []plainAnswer) error {
	ids := make([]string, 0, len(answers))
	keys := make([]string, 0, len(answers))
	args := make([]any, 0, 2*len(answers))
	for _, a := range answers {
		ids = append(ids, a.entryID)
		if a.out != nil {
			keys = append(keys, a.replyTo)
			args = append(args, a.callID, a.out)
		}
	}
	pipe := rdb.Pipeline()
	if len(keys) > 0 {
		pipe.EvalSha(ctx, pushAnswers.Hash(), keys, args...) // loaded by servePlainPushed
	}
	pipe.XAck(ctx, plainRequests, plainGroup, ids...)
	_, err := pipe.Exec(ctx)
	return err
}

// subscribePushed subscribes to the answers pushed to reply, and returns
// once Redis has confirmed it: no answer published later is missed.
func subscribePushed(ctx context.Context, rdb *redis.Client, reply string) (*redis.PubSub, error) {
	sub := rdb.Subscribe(ctx, reply)
	if _, err := sub.Receive(ctx); err != nil {
		_ = sub.Close()
		return nil, fmt.Errorf("plain RPC client: subscribing to %s: %w", reply, err)
	}
	return sub, nil
}

// readPushed hands each answer pushed to the instance to its waiting
// call, until close ends the subscription.
func (p *plainInstance) readPushed() {
	defer p.wg.Done()
	for p.ctx.Err() == nil {
		msg, err := p.pushed.ReceiveMessage(p.ctx)
		if err != nil {
			if p.ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond) // a broken connection: go-redis subscribes again on the next receive
			}
			continue
		}
		_, rest, _ := strings.Cut(msg.Payload, "\x00") // the entry's id
		id, payload, _ := strings.Cut(rest, "\x00")
		p.answer(id, payload)
	}
}
