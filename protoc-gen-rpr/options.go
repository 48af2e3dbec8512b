package main

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"

	rprv1 "github.com/rprtunnel/rpr/gen/rpr/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

// service is a proto service with what its options say, checked: everything
// the generator needs beyond protogen's view of the service.
type service struct {
	*protogen.Service
	names      serviceNames
	bizCode    string // (rpr.v1.service).biz_code, "" when unset
	deprecated bool   // option deprecated = true
	methods    []*method
}

// method is a proto method with what its options say, checked.
type method struct {
	*protogen.Method
	names      methodNames
	fullName   string        // "pkg.Service/Method"
	timeout    time.Duration // method's timeout, else the service's; 0 when neither sets one
	idempotent bool          // idempotency_level is IDEMPOTENT or NO_SIDE_EFFECTS
	deprecated bool          // option deprecated = true
	retry      *retryPolicy  // (rpr.v1.method).retry, nil when unset
}

// retryPolicy is a checked (rpr.v1.method).retry option; zero fields mean
// the runtime's defaults.
type retryPolicy struct {
	maxAttempts                int
	initialBackoff, maxBackoff time.Duration
	multiplier                 float64
	codes                      []tunnel.Code
}

// bizCodePattern is what (rpr.v1.service).biz_code must match when set: it is
// a field of every request id, so it has a fixed shape.
var bizCodePattern = regexp.MustCompile(`^[A-Z0-9]{4}$`)

// loadService reads and checks the options of s and its methods. It returns
// every problem it finds, not only the first, so one run of the plugin shows
// all that needs fixing.
func loadService(s *protogen.Service) (*service, error) {
	var errs []error
	svcOpts, _ := s.Desc.Options().(*descriptorpb.ServiceOptions)
	rprOpts, _ := proto.GetExtension(svcOpts, rprv1.E_Service).(*rprv1.ServiceOptions)

	svc := &service{
		Service:    s,
		names:      namesOfService(s),
		bizCode:    rprOpts.GetBizCode(),
		deprecated: svcOpts.GetDeprecated(),
	}
	if svc.bizCode != "" && !bizCodePattern.MatchString(svc.bizCode) {
		errs = append(errs, fmt.Errorf("protoc-gen-rpr: service %s: (rpr.v1.service).biz_code %q must be exactly 4 upper-case letters or digits (A-Z, 0-9), e.g. \"ORD1\", or left out",
			s.Desc.FullName(), svc.bizCode))
	}
	serviceTimeout, err := timeoutOption(rprOpts.GetTimeout())
	if err != nil {
		errs = append(errs, fmt.Errorf("protoc-gen-rpr: service %s: (rpr.v1.service).timeout %w", s.Desc.FullName(), err))
	}

	for _, m := range s.Methods {
		meth, err := loadMethod(m, serviceTimeout)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		svc.methods = append(svc.methods, meth)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return svc, nil
}

// loadMethod reads and checks the options of m. serviceTimeout is the
// service's default, used when m sets no timeout of its own.
func loadMethod(m *protogen.Method, serviceTimeout time.Duration) (*method, error) {
	name := fullMethodName(m)
	if m.Desc.IsStreamingClient() || m.Desc.IsStreamingServer() {
		return nil, fmt.Errorf("protoc-gen-rpr: %s is a streaming method; rpr supports unary methods only (remove the stream keyword or move it to a gRPC service)", name)
	}
	methodOpts, _ := m.Desc.Options().(*descriptorpb.MethodOptions)
	rprOpts, _ := proto.GetExtension(methodOpts, rprv1.E_Method).(*rprv1.MethodOptions)
	if rprOpts.GetAsync() {
		return nil, fmt.Errorf("protoc-gen-rpr: %s is marked (rpr.v1.method).async; async methods need a newer rpr (not supported by this protoc-gen-rpr yet)", name)
	}
	timeout, err := timeoutOption(rprOpts.GetTimeout())
	if err != nil {
		return nil, fmt.Errorf("protoc-gen-rpr: %s: (rpr.v1.method).timeout %w", name, err)
	}
	// A zero timeout counts as unset, as proto3 zero values do: the
	// service's timeout applies.
	if timeout == 0 {
		timeout = serviceTimeout
	}

	retry, err := retryOption(rprOpts.GetRetry())
	if err != nil {
		return nil, fmt.Errorf("protoc-gen-rpr: %s: (rpr.v1.method).retry: %w", name, err)
	}

	level := methodOpts.GetIdempotencyLevel()
	return &method{
		retry:      retry,
		Method:     m,
		names:      namesOfMethod(m.Parent, m),
		fullName:   name,
		timeout:    timeout,
		idempotent: level == descriptorpb.MethodOptions_IDEMPOTENT || level == descriptorpb.MethodOptions_NO_SIDE_EFFECTS,
		deprecated: methodOpts.GetDeprecated(),
	}, nil
}

// retryOption checks a retry policy option; nil means unset.
func retryOption(p *rprv1.RetryPolicy) (*retryPolicy, error) {
	if p == nil {
		return nil, nil
	}
	out := &retryPolicy{maxAttempts: int(p.GetMaxAttempts()), multiplier: p.GetMultiplier()}
	if p.GetMaxAttempts() > 100 {
		return nil, fmt.Errorf("max_attempts %d is more than 100; a call is not a queue", p.GetMaxAttempts())
	}
	if out.multiplier != 0 && (out.multiplier < 1 || math.IsNaN(out.multiplier) || math.IsInf(out.multiplier, 0)) {
		return nil, fmt.Errorf("multiplier %v must be at least 1", out.multiplier)
	}
	var err error
	if out.initialBackoff, err = timeoutOption(p.GetInitialBackoff()); err != nil {
		return nil, fmt.Errorf("initial_backoff %w", err)
	}
	if out.maxBackoff, err = timeoutOption(p.GetMaxBackoff()); err != nil {
		return nil, fmt.Errorf("max_backoff %w", err)
	}
	for _, name := range p.GetRetryableCodes() {
		code, ok := tunnel.ParseCode(name)
		if !ok || code == tunnel.OK {
			return nil, fmt.Errorf("retryable_codes: %q is not a status code; use a name such as \"UNAVAILABLE\"", name)
		}
		out.codes = append(out.codes, code)
	}
	return out, nil
}

// timeoutOption converts a timeout option to a time.Duration; nil means 0
// (unset). Its errors complete a sentence that starts with the option's name.
func timeoutOption(d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, fmt.Errorf("is not a valid google.protobuf.Duration: %v", err)
	}
	if d.GetSeconds() < 0 || d.GetNanos() < 0 {
		return 0, fmt.Errorf("is negative (%v); set a positive timeout or leave it out", d.AsDuration())
	}
	// time.Duration counts nanoseconds in an int64: about 292 years.
	if d.GetSeconds() >= math.MaxInt64/int64(time.Second) {
		return 0, fmt.Errorf("of %d seconds is longer than a time.Duration can hold (about 292 years)", d.GetSeconds())
	}
	return d.AsDuration(), nil
}
