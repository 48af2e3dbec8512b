package tunnel

import "time"

// CallOption configures one call. Pass options as the last arguments of a
// generated client method.
type CallOption interface {
	apply(*callConfig)
}

// callConfig collects what a call's options asked for.
type callConfig struct {
	header         Metadata
	responseHeader *Metadata
	trailer        *Metadata
	timeout        time.Duration
	requestID      *string
	retry          *RetryPolicy
	idempotencyKey string    // async only
	processAt      time.Time // async only; zero: at once
	lane           string    // "" : the routing table decides
}

type callOptionFunc func(*callConfig)

func (f callOptionFunc) apply(c *callConfig) { f(c) }

// WithHeader adds a request header (metadata) to the call. Keys are
// case-insensitive; calling it twice with one key sends both values.
func WithHeader(key, value string) CallOption {
	return callOptionFunc(func(c *callConfig) {
		if c.header == nil {
			c.header = Metadata{}
		}
		c.header.Add(key, value)
	})
}

// WithResponseHeader stores the response headers the handler set (with
// SetHeader) into *md once the call returns, also when it fails.
func WithResponseHeader(md *Metadata) CallOption {
	return callOptionFunc(func(c *callConfig) { c.responseHeader = md })
}

// WithTrailer stores the response trailers the handler set (with
// SetTrailer) into *md once the call returns, also when it fails.
func WithTrailer(md *Metadata) CallOption {
	return callOptionFunc(func(c *callConfig) { c.trailer = md })
}

// WithTimeout sets the call's deadline relative to now, overriding the
// method's default. A deadline already on the context still wins when it is
// earlier.
func WithTimeout(d time.Duration) CallOption {
	return callOptionFunc(func(c *callConfig) { c.timeout = d })
}

// CaptureRequestID stores the call's request id in *id as soon as the call
// starts, so it can be logged or traced whatever the outcome.
func CaptureRequestID(id *string) CallOption {
	return callOptionFunc(func(c *callConfig) { c.requestID = id })
}

// WithRetry retries the call under policy (overriding the method's default
// from its (rpr.v1.method).retry option). Retries happen only when they
// cannot run the request twice: see RetryPolicy.
func WithRetry(policy RetryPolicy) CallOption {
	return callOptionFunc(func(c *callConfig) { c.retry = &policy })
}

// WithoutRetry turns off retries for this call, including the method's
// default.
func WithoutRetry() CallOption {
	return callOptionFunc(func(c *callConfig) { c.retry = nil })
}

// WithLane sends the call to lane, bypassing the service's routing table:
// to try a new version directly, or to pin a test's calls. The lane must
// have a live server, or the call fails UNAVAILABLE, not executed.
func WithLane(lane string) CallOption {
	return callOptionFunc(func(c *callConfig) { c.lane = lane })
}
