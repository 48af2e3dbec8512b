package wire

// The request state machine lives in the hash rpr:v1:{S}:st:<id>, named by
// the request id for unary calls and by the idempotency key for async
// ones. Its field StateField holds one of the states below; the other
// fields are StateWorker to StateMarkedMs.
//
//	(absent) --worker claims--> PROCESSING --> SUCCESS | FAILED
//	(absent) --caller gives up--> TIMEOUT | CANCELLED
//	async, after the last attempt: DEAD (dead-lettered; a new request
//	with the key may run)
//	async, after the last attempt while the dead-letter stream is at its
//	cap: FAILED with StateHeld (the letter waits; the request is in the
//	retry set as its next attempt and is dead-lettered, not run, when it
//	comes back and there is room)
//
// Whoever moves the state out of absent first wins: that is what makes
// "not executed" provable. All times are Redis's own (TIME).
const (
	StateProcessing = "PROCESSING"
	StateSuccess    = "SUCCESS"
	StateFailed     = "FAILED"
	StateTimeout    = "TIMEOUT"
	StateCancelled  = "CANCELLED"
	StateDead       = "DEAD"
)

// Fields of a state hash.
const (
	StateField          = "state"           // one of the states above
	StateWorker         = "worker"          // the worker that runs (or ran) the request
	StateEntry          = "entry"           // the request stream entry being run
	StateLease          = "lease"           // Redis ms until which the worker's claim holds
	StateAttempt        = "attempt"         // the attempt being run
	StateResponse       = "resp"            // the final response envelope (SUCCESS, FAILED)
	StateClaimedMs      = "claimed_ms"      // when a worker claimed it
	StateDoneMs         = "done_ms"         // when it finished
	StateMarkedMs       = "marked_ms"       // when the caller marked it TIMEOUT or CANCELLED
	StatePreviousWorker = "previous_worker" // the worker it was taken over from
	StateSent           = "sent"            // a stream: messages the server sent
	StateReceived       = "received"        // a stream: messages the server received
	// StateID names the request whose outcome an async request's state
	// hash holds, when the hash is named by an idempotency key the caller
	// chose (for the default key, the request id, it is left out).
	StateID = "id"
	// StateHeld holds the fields of an async request's dead letter (a
	// JSON array of field/value pairs, as DeadLetter.Pairs) while the
	// dead-letter stream is at its cap (ServerOptions.MaxDeadLetters);
	// absent otherwise. A worker that takes such a request dead-letters it
	// with these fields instead of running it.
	StateHeld = "held"
)
