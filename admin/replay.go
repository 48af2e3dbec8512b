package admin

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// ReplayResult counts what DeadLetters.Replay did.
type ReplayResult struct {
	// Replayed were queued again, with attempts starting over at 1.
	Replayed int
	// AlreadySucceeded were dropped without running: another request with
	// the same idempotency key has succeeded since.
	AlreadySucceeded int
	// Gone were no longer in the dead-letter stream (replayed or dropped by
	// someone else meanwhile).
	Gone int
	// Skipped cannot be replayed (not async, undecodable, in a shard no
	// server reads any more, or with a foreign value at its idempotency
	// key's state), by entry id with the reason; they stay in the
	// dead-letter stream.
	Skipped map[string]string
	// Rerouted counts, by the lane they were dead-lettered in, the letters
	// queued in the default lane instead, because their lane has no live
	// server any more (its requests would wait there for one that may
	// never come). They are counted in Replayed, AlreadySucceeded or Gone
	// too.
	Rerouted map[string]int
}

// replayBatch is how many dead letters one replay script run moves, and
// how many ids one Drop round trip deletes.
const replayBatch = 100

// replayTarget is where a batch of replayed letters goes: one shard's
// dead-letter stream and one of its lanes' request stream.
type replayTarget struct {
	shard int
	lane  string
}

// Replay queues dead letters (as List or Get returned them) again, each
// atomically with its removal from its dead-letter stream, so a crash
// mid-way neither loses nor duplicates one. Attempts start over at 1 and
// the replay is counted in the envelope.
//
// A letter goes back to the shard it came from (where its idempotency
// key's state is) and to the lane it was dead-lettered in, unless that
// lane has no live server now: then to the default lane, counted in
// ReplayResult.Rerouted. Letters of a shard beyond the recorded count are
// skipped: no server reads that shard any more. It costs one round trip
// for the service's view, then one script run per 100 letters of one shard
// and lane.
//
// progress, when not nil, is called after each batch with how many of
// letters have been dealt with.
func (q *DeadLetters) Replay(ctx context.Context, letters []DeadLetter, progress func(done int)) (ReplayResult, error) {
	s := q.svc
	res := ReplayResult{Skipped: map[string]string{}, Rerouted: map[string]int{}}
	view, err := s.view(ctx)
	if err != nil {
		return res, fmt.Errorf("rpr: replay dead letters of %s: %w", s.name, err)
	}
	now, shards, live := view.now, view.shards, view.live()

	batches := map[replayTarget][]DeadLetter{}
	var order []replayTarget // targets in order of first use, for a stable flush order
	done := 0
	flush := func(to replayTarget) error {
		batch := batches[to]
		if len(batch) == 0 {
			return nil
		}
		sk := s.keys.Shard(s.name, to.shard)
		call := store.NewReplay(sk, sk.Requests(to.lane))
		for _, dl := range batch {
			env := *dl.envelope
			if env.Key == env.ID {
				env.Key = "" // the decoder's default: not on the wire
			}
			env.Attempt, env.Replays, env.Enqueued = 1, env.Replays+1, now.UnixMilli()
			raw, err := wire.EncodeRequest(&env)
			if err != nil {
				return fmt.Errorf("rpr: replay dead letter %s of %s: encode its envelope: %w", dl.EntryID, s.name, err)
			}
			call.Add(dl.StreamID, sk.State(dl.envelope.StateName()), raw)
		}
		store.Run(ctx, s.rdb, &call.Call)
		out, err := call.Result()
		if err != nil {
			return fmt.Errorf("rpr: replay dead letters of %s (shard %d, lane %s): %w", s.name, to.shard, to.lane, err)
		}
		for i, verdict := range out {
			switch verdict {
			case store.Replayed:
				res.Replayed++
			case store.Succeeded:
				res.AlreadySucceeded++
			case store.ForeignState:
				res.Skipped[batch[i].EntryID] = fmt.Sprintf("its idempotency key's state %s holds a value rpr did not write there (not a hash): something other than rpr writes under rpr's prefix; delete that key, then replay it", sk.State(batch[i].envelope.StateName()))
			default:
				res.Gone++
			}
		}
		done += len(batch)
		batches[to] = batch[:0]
		if progress != nil {
			progress(done)
		}
		return nil
	}
	for _, dl := range letters {
		switch {
		case dl.envelope == nil:
			res.Skipped[dl.EntryID] = "its envelope does not decode (" + dl.DecodeError + "); drop it"
		case !dl.Async:
			res.Skipped[dl.EntryID] = "a unary request: its caller stopped waiting long ago; drop it"
		case dl.Shard >= shards:
			res.Skipped[dl.EntryID] = fmt.Sprintf("it is in shard %d, but %s has %d shard(s) now, so no server would read it there; raise the shard count to %d or more (`rpr shards set`) to replay it, or drop it", dl.Shard, s.name, shards, dl.Shard+1)
		default:
			lane := store.LaneOrDefault(dl.Lane)
			if lane != tunnel.DefaultLane && live[lane] == 0 {
				res.Rerouted[lane]++
				lane = tunnel.DefaultLane
			}
			to := replayTarget{shard: dl.Shard, lane: lane}
			if _, seen := batches[to]; !seen {
				order = append(order, to)
			}
			batches[to] = append(batches[to], dl)
			if len(batches[to]) == replayBatch {
				if err := flush(to); err != nil {
					return res, err
				}
			}
			continue
		}
		done++
	}
	for _, to := range order {
		if err := flush(to); err != nil {
			return res, err
		}
	}
	if progress != nil {
		progress(done)
	}
	return res, nil
}

// Drop deletes dead letters by entry id (DeadLetter.EntryID) and returns
// how many were there, in one pipelined round trip per 100 ids. It checks
// every id first and deletes nothing when one is malformed (the error
// wraps ErrBadDeadLetterID). progress, when not nil, is called after each
// batch with how many ids have been dealt with.
func (q *DeadLetters) Drop(ctx context.Context, entryIDs []string, progress func(done int)) (int64, error) {
	s := q.svc
	type located struct {
		shard    int
		streamID string
	}
	ids := make([]located, len(entryIDs))
	for i, id := range entryIDs {
		shard, streamID, err := ParseDeadLetterID(id)
		if err != nil {
			return 0, err
		}
		ids[i] = located{shard, streamID}
	}
	var dropped int64
	for start := 0; start < len(ids); start += replayBatch {
		end := min(start+replayBatch, len(ids))
		byShard := map[int][]string{}
		var shards []int
		for _, id := range ids[start:end] {
			if _, seen := byShard[id.shard]; !seen {
				shards = append(shards, id.shard)
			}
			byShard[id.shard] = append(byShard[id.shard], id.streamID)
		}
		pipe := s.rdb.Pipeline()
		dels := make([]*redis.IntCmd, len(shards))
		for i, shard := range shards {
			dels[i] = pipe.XDel(ctx, s.keys.Shard(s.name, shard).DeadLetters(), byShard[shard]...)
		}
		_, _ = pipe.Exec(ctx)
		for i, cmd := range dels {
			if err := cmd.Err(); err != nil {
				return dropped, fmt.Errorf("rpr: drop dead letters from %s: %w", s.keys.Shard(s.name, shards[i]).DeadLetters(), err)
			}
			dropped += cmd.Val()
		}
		if progress != nil {
			progress(end)
		}
	}
	return dropped, nil
}
