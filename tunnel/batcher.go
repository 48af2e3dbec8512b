package tunnel

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
)

// pipelineOp is one command waiting to leave in a pipeline.
type pipelineOp struct {
	command pipelineCommand
	// script, when set, is the script call the command is: recovered
	// (sent again with EVAL) when Redis did not have the script.
	script *store.Call
	// state moves from opQueued to opTaken when a flusher takes the op,
	// or to opAbandoned when its submitter gives up first.
	state atomic.Int32
}

// pipelineCommand is what a pipelineOp sends, and is told the outcome. (An
// interface rather than two funcs: a method value of the op would cost an
// allocation on every call.)
type pipelineCommand interface {
	// queue sends the command through c: a pipeline, or the client
	// itself when the op is alone.
	queue(ctx context.Context, c commandSink) redis.Cmder
	// finished receives the finished command. It runs on the flushing
	// goroutine, so it must not block.
	finished(cmd redis.Cmder)
}

// commandSink is what an op's command is queued on: a pipeline, or the
// client itself when the op is alone. Ops use its typed methods and run
// commands built by hand (store.Commander).
type commandSink interface {
	redis.Cmdable
	store.Commander
}

const (
	opQueued int32 = iota
	opTaken
	opAbandoned
)

// abandon withdraws a queued op. It reports true when the op had not been
// taken by a flusher, so its command is never sent; false means it may have
// been sent already.
func (op *pipelineOp) abandon() bool {
	return op.state.CompareAndSwap(opQueued, opAbandoned)
}

// scriptOp returns an op that runs a script call and hands its error to
// done.
func scriptOp(call *store.Call, done func(error)) *pipelineOp {
	return &pipelineOp{command: scriptCommand{call: call, done: done}, script: call}
}

// scriptCommand is a script call as a pipelineCommand.
type scriptCommand struct {
	call *store.Call
	done func(error)
}

func (s scriptCommand) queue(ctx context.Context, c commandSink) redis.Cmder {
	return s.call.Queue(ctx, c)
}

func (s scriptCommand) finished(redis.Cmder) { s.done(s.call.Err()) }

// batcher coalesces commands from many goroutines into pipelines (see
// coalescer): a lone command leaves at once; under load, commands that
// arrive while a pipeline is in flight ride the next one.
type batcher struct {
	*coalescer[*pipelineOp]
	rdb redis.UniversalClient
}

// newBatcher starts a batcher; stop it with close.
func newBatcher(client redis.UniversalClient, flushers, maxBatch, queueSize int, observe func(size int, full bool)) *batcher {
	b := &batcher{rdb: client}
	b.coalescer = newCoalescer(flushers, maxBatch, queueSize, b.flush, observe)
	return b
}

// flush sends batch in one pipeline and hands each op its result. Script
// calls whose script was missing are recovered first.
func (b *batcher) flush(batch []*pipelineOp) {
	// Ops must complete even when their submitter's context has ended
	// (a server completion must be written whatever happens to the call),
	// so the pipeline runs on its own context.
	ctx := context.Background()
	live := batch[:0]
	for _, op := range batch {
		if op.state.CompareAndSwap(opQueued, opTaken) {
			live = append(live, op)
		}
	}
	if len(live) == 0 {
		return
	}
	cmds := make([]redis.Cmder, len(live))
	if len(live) == 1 {
		cmds[0] = live[0].command.queue(ctx, b.rdb) // one command needs no pipeline
	} else {
		pipe := b.rdb.Pipeline()
		for i, op := range live {
			cmds[i] = op.command.queue(ctx, pipe)
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
	}
	for i, op := range live {
		if op.script != nil {
			op.script.Recover(ctx, b.rdb)
		}
		op.command.finished(cmds[i])
	}
}

// fieldXAdd is an XADD of a single field, kept in the op that sends it:
// its arguments are the command's own argument list rather than a
// redis.XAddArgs, which go-redis would copy into a new list (and whose
// Values would be boxed again) on every send, and the command itself is
// kept here rather than allocated per send (an op sends once, and its
// finished is the command's last reader).
type fieldXAdd struct {
	argv  [5]any // XADD stream * field value
	value store.BytesArg
	cmd   redis.StringCmd
}

// set makes the XADD add field=value to stream, a string (a name boxed
// once and kept, as clientService.requestStream gives, costs no
// allocation here).
func (x *fieldXAdd) set(stream any, field string, value []byte) {
	x.value = value
	x.argv = [5]any{"xadd", stream, "*", field, &x.value} // no copy boxed: see store.BytesArg
}

// dropValue forgets the value, whose memory its owner is about to reuse.
func (x *fieldXAdd) dropValue() { x.value = nil }

// queue sends the XADD at most once (store.AtMostOnceString): it adds a
// request, which go-redis must not add again after a failure that may
// have carried it to Redis, and whose error must be its only attempt's.
func (x *fieldXAdd) queue(ctx context.Context, c commandSink) redis.Cmder {
	x.cmd = *redis.NewStringCmd(ctx, x.argv[:]...)
	_ = c.Process(ctx, store.AtMostOnceString(&x.cmd)) // the error is cmd's
	return &x.cmd
}

// xaddOp is one XADD of a single field, waiting in a batcher; done
// receives the entry's id, or the error.
type xaddOp struct {
	pipelineOp
	fieldXAdd
	done func(entryID string, err error)
}

// newXAddOp returns the op that adds field=value to stream.
func newXAddOp(stream any, field string, value []byte, done func(entryID string, err error)) *xaddOp {
	op := &xaddOp{done: done}
	op.set(stream, field, value)
	op.command = op
	return op
}

func (op *xaddOp) finished(cmd redis.Cmder) {
	xadd, _ := cmd.(*redis.StringCmd)
	if err := cmd.Err(); err != nil || xadd == nil {
		op.done("", err)
		return
	}
	op.done(xadd.Val(), nil)
}
