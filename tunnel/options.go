package tunnel

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"

	rprv1 "github.com/rprtunnel/rpr/gen/rpr/v1"
)

// MethodDescFor returns the MethodDesc of md for Client.Invoke (or, for an
// async method, Client.Enqueue), with what generated code would put there:
// Idempotent from idempotency_level, Timeout from (rpr.v1.method).timeout
// else (rpr.v1.service).timeout, Retry from (rpr.v1.method).retry, Async
// from (rpr.v1.method).async, and BizCode and MaxBacklog from
// (rpr.v1.service). With a descriptor from LoadSchema and dynamicpb
// messages, it calls a service whose Go types the program does not have.
// Streaming methods, and async methods whose output is not
// google.protobuf.Empty, are refused, as protoc-gen-rpr refuses them.
func MethodDescFor(md protoreflect.MethodDescriptor) (*MethodDesc, error) {
	sd, ok := md.Parent().(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("rpr: method %s has no service", md.FullName())
	}
	full := string(sd.FullName()) + "/" + string(md.Name())
	if md.IsStreamingClient() || md.IsStreamingServer() {
		return nil, fmt.Errorf("rpr: %s is a streaming method; rpr carries unary methods only", full)
	}
	svcOpts, _ := sd.Options().(*descriptorpb.ServiceOptions)
	svcRPR, _ := proto.GetExtension(svcOpts, rprv1.E_Service).(*rprv1.ServiceOptions)
	methodOpts, _ := md.Options().(*descriptorpb.MethodOptions)
	methodRPR, _ := proto.GetExtension(methodOpts, rprv1.E_Method).(*rprv1.MethodOptions)
	if methodRPR.GetAsync() && md.Output().FullName() != emptyMessageName {
		return nil, fmt.Errorf("rpr: %s is an async method ((rpr.v1.method).async) but returns %s; async methods must return %s", full, md.Output().FullName(), emptyMessageName)
	}

	desc := &MethodDesc{Service: string(sd.FullName()), Name: string(md.Name())}
	level := methodOpts.GetIdempotencyLevel()
	desc.Idempotent = level == descriptorpb.MethodOptions_IDEMPOTENT || level == descriptorpb.MethodOptions_NO_SIDE_EFFECTS
	var err error
	if desc.Timeout, err = DurationOption(methodRPR.GetTimeout()); err != nil {
		return nil, fmt.Errorf("rpr: %s: (rpr.v1.method).timeout %w", full, err)
	}
	if desc.Timeout == 0 { // unset or zero: the service's applies
		if desc.Timeout, err = DurationOption(svcRPR.GetTimeout()); err != nil {
			return nil, fmt.Errorf("rpr: %s: (rpr.v1.service).timeout %w", full, err)
		}
	}
	if code := svcRPR.GetBizCode(); code != "" {
		if err := ValidateBizCode(code); err != nil {
			return nil, fmt.Errorf("rpr: %s: (rpr.v1.service).biz_code: %w", full, err)
		}
		desc.BizCode = code
	}
	if p := methodRPR.GetRetry(); p != nil {
		if desc.Retry, err = RetryPolicyOption(p, methodRPR.GetAsync()); err != nil {
			return nil, fmt.Errorf("rpr: %s: (rpr.v1.method).retry: %w", full, err)
		}
	}
	desc.Async = methodRPR.GetAsync()
	if desc.Shards, err = ShardsOption(svcRPR.GetShards()); err != nil {
		return nil, fmt.Errorf("rpr: service %s: (rpr.v1.service).shards %w", desc.Service, err)
	}
	if desc.MaxBacklog, err = MaxBacklogOption(svcRPR.GetMaxBacklog()); err != nil {
		return nil, fmt.Errorf("rpr: %s: (rpr.v1.service).max_backlog %w", full, err)
	}
	return desc, nil
}

// emptyMessageName is the output type async methods must have: their
// handlers return only an error.
const emptyMessageName = "google.protobuf.Empty"

// ShardsOption converts a (rpr.v1.service).shards option to
// MethodDesc.Shards; 0 stays 0, meaning the Shards options. Shared by
// protoc-gen-rpr and MethodDescFor. Its errors complete a sentence that
// starts with the option's name.
func ShardsOption(n uint32) (int, error) {
	if n > MaxShards {
		return 0, fmt.Errorf("of %d is more than %d; every shard costs each server a blocking read, so use fewer (e.g. 3 to 16) or leave it out", n, MaxShards)
	}
	return int(n), nil
}

// MaxBacklogOption converts a (rpr.v1.service).max_backlog option to
// MethodDesc.MaxBacklog; 0 stays 0, meaning the client's default. Shared by
// protoc-gen-rpr and MethodDescFor. Its errors complete a sentence that
// starts with the option's name.
func MaxBacklogOption(n uint64) (int64, error) {
	if n > math.MaxInt64 {
		return 0, fmt.Errorf("of %d is more than an int64 can hold; set a realistic cap (e.g. 100000) or leave it out", n)
	}
	return int64(n), nil
}

// DurationOption converts a duration option of proto/rpr/v1/options.proto
// (a timeout, a backoff); nil is 0, meaning unset. protoc-gen-rpr and
// MethodDescFor share it, so generated code and `rpr call` read options
// the same way. Its errors complete a sentence that starts with the
// option's name.
func DurationOption(d *durationpb.Duration) (time.Duration, error) {
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

// RetryPolicyOption converts a (rpr.v1.method).retry option of a unary or
// an async method, checking it; unset fields stay zero, meaning the
// runtime's defaults. Shared by protoc-gen-rpr and MethodDescFor.
func RetryPolicyOption(p *rprv1.RetryPolicy, async bool) (*RetryPolicy, error) {
	switch n := p.GetMaxAttempts(); {
	case !async && n > 100:
		return nil, fmt.Errorf("max_attempts %d is more than 100; the caller of a unary method waits through every attempt (to keep trying for long, make the method async)", n)
	case async && n > 1000:
		return nil, fmt.Errorf("max_attempts %d is more than 1000; let a request that fails that long go to the dead-letter stream, and replay it once fixed (rpr dlq replay)", n)
	}
	out := &RetryPolicy{MaxAttempts: int(p.GetMaxAttempts()), Multiplier: p.GetMultiplier()}
	if m := out.Multiplier; m != 0 && (m < 1 || math.IsNaN(m) || math.IsInf(m, 0)) {
		return nil, fmt.Errorf("multiplier %v must be at least 1", m)
	}
	var err error
	if out.InitialBackoff, err = DurationOption(p.GetInitialBackoff()); err != nil {
		return nil, fmt.Errorf("initial_backoff %w", err)
	}
	if out.MaxBackoff, err = DurationOption(p.GetMaxBackoff()); err != nil {
		return nil, fmt.Errorf("max_backoff %w", err)
	}
	for _, name := range p.GetRetryableCodes() {
		code, ok := ParseCode(name)
		if !ok || code == OK {
			return nil, fmt.Errorf("retryable_codes: %q is not a status code; use a name such as \"UNAVAILABLE\"", name)
		}
		out.RetryableCodes = append(out.RetryableCodes, code)
	}
	return out, nil
}
