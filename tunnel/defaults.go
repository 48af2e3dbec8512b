package tunnel

import (
	"time"

	"github.com/rprtunnel/rpr/internal/store"
)

// DefaultPrefix starts every key rpr writes. Change it (ClientOptions and
// ServerOptions.Prefix) to run several independent rpr deployments on one
// Redis.
const DefaultPrefix = store.DefaultPrefix

// DefaultLane is the name of the lane a server joins when it names none
// (ServerOptions.Lane) and calls go to when no route says otherwise. Its
// request stream has no lane suffix: rpr:v1:{S}:req.
const DefaultLane = store.DefaultLane

// Client defaults, used where ClientOptions leaves a field zero.
const (
	// DefaultCallTimeout bounds calls whose context has no deadline and
	// whose method sets no timeout (ClientOptions.DefaultTimeout). Every
	// call through Redis has a deadline, so a request never waits in a
	// queue forever.
	DefaultCallTimeout = 30 * time.Second
	// DefaultMaxMessageBytes is the limit on request and response payloads
	// on both sides (ClientOptions and ServerOptions MaxRequestBytes and
	// MaxResponseBytes), as in gRPC.
	DefaultMaxMessageBytes = 4 << 20
	// DefaultMaxInFlight is how many calls (unary and async enqueues) one
	// Client has in flight at most (ClientOptions.MaxInFlight).
	DefaultMaxInFlight = 4096
	// DefaultMaxBacklog is the cap on a service's queue, requests waiting
	// in its stream (new and running) plus its retry set, for services
	// whose proto sets no (rpr.v1.service).max_backlog
	// (ClientOptions.MaxBacklog).
	DefaultMaxBacklog = 100_000
	// DefaultBacklogWatermark is the share of the cap at which clients
	// start refusing calls (ClientOptions.BacklogWatermark).
	DefaultBacklogWatermark = 0.85
)

// Server defaults, used where ServerOptions leaves a field zero.
const (
	// DefaultConcurrency is how many handlers a Server runs at once, over
	// all its services (ServerOptions.Concurrency).
	DefaultConcurrency = 64
	// DefaultBatchSize is the most requests a Server takes in one read
	// (ServerOptions.BatchSize).
	DefaultBatchSize = 64
	// DefaultLease is how long a worker's claim on a running request holds
	// without renewal (ServerOptions.Lease).
	DefaultLease = 5 * time.Second
	// DefaultIdempotencyWindow is how long a server remembers that an async
	// request's idempotency key succeeded, so that a second request or
	// delivery with that key is not run again
	// (ServerOptions.IdempotencyWindow).
	DefaultIdempotencyWindow = 24 * time.Hour
	// DefaultRetryPollInterval is how often a server moves due async
	// retries and delayed requests to their queue
	// (ServerOptions.RetryPollInterval).
	DefaultRetryPollInterval = 250 * time.Millisecond
	// DefaultMaxStreams is how many streaming calls a Server runs at once
	// (ServerOptions.MaxStreams).
	DefaultMaxStreams = 10_000
	// DefaultAsyncTimeout bounds each attempt of an async request whose
	// call (WithTimeout) and method ((rpr.v1.method).timeout) set no
	// timeout.
	DefaultAsyncTimeout = 30 * time.Second
	// DefaultMaxDeadLetters is how many entries a dead-letter stream takes
	// before servers hold further letters back
	// (ServerOptions.MaxDeadLetters).
	DefaultMaxDeadLetters = 10_000
)

// Bounds on what a request's envelope may ask of a server. They are the
// caller's to choose (WithRetry, WithTimeout), and a caller may be careless
// or hostile, so a server takes a larger value as the bound: a request can
// neither retry forever nor carry a time limit that overflows.
const (
	// MaxAsyncAttempts bounds a retry policy's MaxAttempts.
	MaxAsyncAttempts = 100
	// MaxRetryBackoff bounds a retry policy's InitialBackoff and
	// MaxBackoff.
	MaxRetryBackoff = time.Hour
	// MaxRetryMultiplier bounds a retry policy's Multiplier.
	MaxRetryMultiplier = 10
	// MaxAsyncTimeout bounds the time limit of one attempt of an async
	// request.
	MaxAsyncTimeout = 24 * time.Hour
	// MaxMetadataBytes bounds a request's metadata (WithHeader), keys and
	// values together, on both sides: the payload has its limit
	// (MaxRequestBytes), and the rest of an envelope must have one too.
	MaxMetadataBytes = 64 << 10
	// envelopeOverhead is what an envelope may hold besides its payload
	// and metadata (id, method, reply-to, key, policy...), generously.
	envelopeOverhead = 16 << 10
)
