package store

import "fmt"

// enqueueScript puts a batch of async requests of one lane of a shard in
// its queue, each unless the queue is at its cap: a request that would
// pass the cap is refused, and nothing already queued is touched. A
// request due later goes to the retry set instead of the stream.
//
//	KEYS[1] request stream   KEYS[2] retry set
//	ARGV[3k-2..3k] request k: cap (entries in the stream plus the retry
//	               set), due time (Redis unix ms; 0 for at once), envelope
//
// Returns {queued_1, backlog_1, queued_2, backlog_2, ...}: queued is 1 or
// 0 (refused), backlog the queue's length after that request.
var enqueueScript = newScript("enqueue", `
local backlog = redis.call('XLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2])
local out = {}
for k = 1, #ARGV / 3 do
  local cap, due, env = tonumber(ARGV[3 * k - 2]), tonumber(ARGV[3 * k - 1]), ARGV[3 * k]
  if backlog >= cap then
    out[2 * k - 1] = 0
  else
    if due > 0 then
      redis.call('ZADD', KEYS[2], due, env)
    else
      redis.call('XADD', KEYS[1], '*', 'e', env)
    end
    backlog = backlog + 1
    out[2 * k - 1] = 1
  end
  out[2 * k] = backlog
end
return out
`)

// Enqueue puts async requests in one lane's queue of one shard, in one
// script run, holding the queue to its cap.
type Enqueue struct {
	Call
	n int
	// capacity is the last cap added, boxed once: requests of one queue
	// share it, and boxing an int64 of 256 or more allocates.
	capacity    int64
	capacityArg any
}

// NewEnqueue starts an Enqueue into the request stream and retry set of
// one lane of a shard; size is how many requests will be added.
func NewEnqueue(stream, retries string, size int) *Enqueue {
	return &Enqueue{Call: Call{script: enqueueScript, keys: []string{stream, retries}, once: true,
		args: make([]any, 0, 3*size), refs: make([]BytesArg, 0, size+1)}} // the envelopes and the retry set's key (see Call.Queue)
}

// Add adds a request: its envelope, the queue's cap for it, and when it
// is due (Redis unix ms; 0 for at once).
func (e *Enqueue) Add(capacity, due int64, envelope []byte) {
	if e.capacityArg == nil || capacity != e.capacity {
		e.capacity, e.capacityArg = capacity, capacity
	}
	e.args = append(e.args, e.capacityArg, due, e.ref(envelope))
	e.n++
}

// Enqueued is Enqueue's verdict on one request: whether it was queued
// (false: the queue was at its cap), and the queue's length after it.
type Enqueued struct {
	Queued  bool
	Backlog int64
}

// Result returns the verdict on each request, in the order added.
func (e *Enqueue) Result() ([]Enqueued, error) {
	out, err := e.ints(2 * e.n)
	if err != nil {
		return nil, fmt.Errorf("%w (for %d requests)", err, e.n)
	}
	verdicts := make([]Enqueued, e.n)
	for i := range verdicts {
		verdicts[i] = Enqueued{Queued: out[2*i] == 1, Backlog: out[2*i+1]}
	}
	return verdicts, nil
}
