package protoopts

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"

	rprv1 "github.com/rprtunnel/rpr/gen/rpr/v1"
	"github.com/rprtunnel/rpr/internal/wire"
)

// EmptyMessage is the output type an async method must have: its handler
// returns only an error, and its caller gets a receipt, not a reply.
const EmptyMessage = "google.protobuf.Empty"

// Retry limits: a unary caller waits through every attempt, and an async
// request that fails for long belongs in the dead-letter stream.
const (
	MaxUnaryAttempts = 100
	MaxAsyncAttempts = 1000
)

// Service is what a service's options say, checked.
type Service struct {
	// BizCode is (rpr.v1.service).biz_code, "" when unset.
	BizCode string
	// Timeout is (rpr.v1.service).timeout, 0 when unset.
	Timeout time.Duration
	// MaxBacklog is (rpr.v1.service).max_backlog, 0 when unset.
	MaxBacklog int64
	// Shards is (rpr.v1.service).shards, 0 when unset.
	Shards int
	// Deprecated is option deprecated = true.
	Deprecated bool
}

// Method is what a method's options say, checked.
type Method struct {
	// Timeout is (rpr.v1.method).timeout, else the service's; 0 when
	// neither sets one (a zero timeout counts as unset, as proto3 zero
	// values do).
	Timeout time.Duration
	// Idempotent is true when idempotency_level is IDEMPOTENT or
	// NO_SIDE_EFFECTS.
	Idempotent bool
	// Async is (rpr.v1.method).async.
	Async bool
	// Deprecated is option deprecated = true.
	Deprecated bool
	// Retry is (rpr.v1.method).retry, nil when unset; zero fields mean the
	// runtime's defaults.
	Retry *Retry
}

// Retry is a (rpr.v1.method).retry option, checked.
type Retry struct {
	MaxAttempts    int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	Multiplier     float64
	// RetryableCodes are canonical status code names, e.g. "UNAVAILABLE".
	RetryableCodes []string
}

var bizCodePattern = regexp.MustCompile(`^[A-Z0-9]{4}$`)

// ReadService reads and checks the options of sd. It reports every problem
// it finds, not only the first, so one run shows all that needs fixing.
func ReadService(sd protoreflect.ServiceDescriptor) (Service, error) {
	opts, _ := sd.Options().(*descriptorpb.ServiceOptions)
	rpr, _ := proto.GetExtension(opts, rprv1.E_Service).(*rprv1.ServiceOptions)
	name := sd.FullName()
	out := Service{BizCode: rpr.GetBizCode(), Deprecated: opts.GetDeprecated()}
	var errs []error
	if out.BizCode != "" && !bizCodePattern.MatchString(out.BizCode) {
		errs = append(errs, fmt.Errorf("service %s: (rpr.v1.service).biz_code %q must be exactly 4 upper-case letters or digits (A-Z, 0-9), e.g. \"ORD1\", or left out", name, out.BizCode))
	}
	var err error
	if out.Timeout, err = duration(rpr.GetTimeout()); err != nil {
		errs = append(errs, fmt.Errorf("service %s: (rpr.v1.service).timeout %w", name, err))
	}
	if n := rpr.GetShards(); n > wire.MaxShards {
		errs = append(errs, fmt.Errorf("service %s: (rpr.v1.service).shards of %d is more than %d; every shard costs each server a blocking read, so use fewer (e.g. 3 to 16) or leave it out", name, n, wire.MaxShards))
	} else {
		out.Shards = int(n)
	}
	if n := rpr.GetMaxBacklog(); n > math.MaxInt64 {
		errs = append(errs, fmt.Errorf("service %s: (rpr.v1.service).max_backlog of %d is more than an int64 can hold; set a realistic cap (e.g. 100000) or leave it out", name, n))
	} else {
		out.MaxBacklog = int64(n)
	}
	return out, errors.Join(errs...)
}

// ReadMethod reads and checks the options of md, a method of a service
// whose options are svc. Unary and streaming methods are both fine; an
// async method must be unary and return EmptyMessage, so ReadMethod
// refuses the others with the error protoc-gen-rpr and
// tunnel.MethodDescFor both report.
func ReadMethod(md protoreflect.MethodDescriptor, svc Service) (Method, error) {
	opts, _ := md.Options().(*descriptorpb.MethodOptions)
	rpr, _ := proto.GetExtension(opts, rprv1.E_Method).(*rprv1.MethodOptions)
	name := FullMethodName(md)
	level := opts.GetIdempotencyLevel()
	out := Method{
		Idempotent: level == descriptorpb.MethodOptions_IDEMPOTENT || level == descriptorpb.MethodOptions_NO_SIDE_EFFECTS,
		Async:      rpr.GetAsync(),
		Deprecated: opts.GetDeprecated(),
	}
	if out.Async && IsStreaming(md) {
		return Method{}, fmt.Errorf("%s is marked (rpr.v1.method).async but is a %s method; an async request waits in a queue with no caller attached, so no stream can cross it: drop async to make it a streaming call, or remove the stream keyword to make it an async method (which returns google.protobuf.Empty)",
			name, StreamKind(md))
	}
	if output := md.Output().FullName(); out.Async && output != EmptyMessage {
		return Method{}, fmt.Errorf("%s is marked (rpr.v1.method).async but returns %s; an async method's caller gets a receipt, not a reply, so it must return %s (import \"google/protobuf/empty.proto\" and declare returns (google.protobuf.Empty)), or drop async to make it a unary call",
			name, output, EmptyMessage)
	}
	var err error
	if out.Timeout, err = duration(rpr.GetTimeout()); err != nil {
		return Method{}, fmt.Errorf("%s: (rpr.v1.method).timeout %w", name, err)
	}
	if out.Timeout == 0 {
		out.Timeout = svc.Timeout
	}
	if p := rpr.GetRetry(); p != nil {
		if IsStreaming(md) {
			return Method{}, fmt.Errorf("%s: (rpr.v1.method).retry on a %s method: streams are never retried (a stream that broke says how far it got, and its caller opens it again if that is safe); remove the option", name, StreamKind(md))
		}
		if out.Retry, err = retry(p, out.Async); err != nil {
			return Method{}, fmt.Errorf("%s: (rpr.v1.method).retry: %w", name, err)
		}
	}
	return out, nil
}

// FullMethodName returns "pkg.Service/Method", the name rpr uses on the
// wire, in logs and in errors.
func FullMethodName(md protoreflect.MethodDescriptor) string {
	return string(md.Parent().FullName()) + "/" + string(md.Name())
}

// IsStreaming reports whether either side of md streams.
func IsStreaming(md protoreflect.MethodDescriptor) bool {
	return md.IsStreamingClient() || md.IsStreamingServer()
}

// StreamKind names the shape of md for messages and listings: "unary",
// "server-streaming", "client-streaming" or "bidirectional streaming".
func StreamKind(md protoreflect.MethodDescriptor) string {
	switch {
	case md.IsStreamingClient() && md.IsStreamingServer():
		return "bidirectional streaming"
	case md.IsStreamingServer():
		return "server-streaming"
	case md.IsStreamingClient():
		return "client-streaming"
	}
	return "unary"
}

// retry checks a retry option of a unary or an async method.
func retry(p *rprv1.RetryPolicy, async bool) (*Retry, error) {
	switch n := p.GetMaxAttempts(); {
	case !async && n > MaxUnaryAttempts:
		return nil, fmt.Errorf("max_attempts %d is more than %d; the caller of a unary method waits through every attempt (to keep trying for long, make the method async)", n, MaxUnaryAttempts)
	case async && n > MaxAsyncAttempts:
		return nil, fmt.Errorf("max_attempts %d is more than %d; let a request that fails that long go to the dead-letter stream, and replay it once fixed (rpr dlq replay)", n, MaxAsyncAttempts)
	}
	out := &Retry{MaxAttempts: int(p.GetMaxAttempts()), Multiplier: p.GetMultiplier()}
	if m := out.Multiplier; m != 0 && (m < 1 || math.IsNaN(m) || math.IsInf(m, 0)) {
		return nil, fmt.Errorf("multiplier %v must be at least 1", m)
	}
	var err error
	if out.InitialBackoff, err = duration(p.GetInitialBackoff()); err != nil {
		return nil, fmt.Errorf("initial_backoff %w", err)
	}
	if out.MaxBackoff, err = duration(p.GetMaxBackoff()); err != nil {
		return nil, fmt.Errorf("max_backoff %w", err)
	}
	for _, name := range p.GetRetryableCodes() {
		code, ok := wire.ParseCode(name)
		if !ok || code == 0 {
			return nil, fmt.Errorf("retryable_codes: %q is not a status code; use a name such as \"UNAVAILABLE\"", name)
		}
		out.RetryableCodes = append(out.RetryableCodes, wire.CodeName(code))
	}
	return out, nil
}

// duration converts a duration option (a timeout, a backoff); nil is 0,
// meaning unset. Its errors complete a sentence that starts with the
// option's name.
func duration(d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, fmt.Errorf("is not a valid google.protobuf.Duration: %v", err)
	}
	if d.GetSeconds() < 0 || d.GetNanos() < 0 {
		return 0, fmt.Errorf("is negative (%v); set a positive duration or leave it out", d.AsDuration())
	}
	// time.Duration counts nanoseconds in an int64: about 292 years.
	if d.GetSeconds() >= math.MaxInt64/int64(time.Second) {
		return 0, fmt.Errorf("of %d seconds is longer than a time.Duration can hold (about 292 years)", d.GetSeconds())
	}
	return d.AsDuration(), nil
}
