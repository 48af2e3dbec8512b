package main

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	rprv1 "github.com/rprtunnel/rpr/gen/rpr/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

// service is a proto service with what its options say, checked: everything
// the generator needs beyond protogen's view of the service.
type service struct {
	*protogen.Service
	names      serviceNames
	bizCode    string // (rpr.v1.service).biz_code, "" when unset
	maxBacklog int64  // (rpr.v1.service).max_backlog, 0 when unset
	shards     int    // (rpr.v1.service).shards, 0 when unset
	deprecated bool   // option deprecated = true
	methods    []*method
}

// method is a proto method with what its options say, checked.
type method struct {
	*protogen.Method
	names      methodNames
	fullName   string              // "pkg.Service/Method"
	timeout    time.Duration       // method's timeout, else the service's; 0 when neither sets one
	idempotent bool                // idempotency_level is IDEMPOTENT or NO_SIDE_EFFECTS
	deprecated bool                // option deprecated = true
	retry      *tunnel.RetryPolicy // (rpr.v1.method).retry, nil when unset; zero fields mean the runtime's defaults
	async      bool                // (rpr.v1.method).async: fire-and-forget, output google.protobuf.Empty
}

// emptyMessage is the output type an async method must have: its handler
// returns only an error, and its caller gets a tunnel.Receipt, not a reply.
const emptyMessage = "google.protobuf.Empty"

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
	serviceTimeout, err := tunnel.DurationOption(rprOpts.GetTimeout())
	if err != nil {
		errs = append(errs, fmt.Errorf("protoc-gen-rpr: service %s: (rpr.v1.service).timeout %w", s.Desc.FullName(), err))
	}
	if svc.shards, err = tunnel.ShardsOption(rprOpts.GetShards()); err != nil {
		errs = append(errs, fmt.Errorf("protoc-gen-rpr: service %s: (rpr.v1.service).shards %w", s.Desc.FullName(), err))
	}
	if svc.maxBacklog, err = tunnel.MaxBacklogOption(rprOpts.GetMaxBacklog()); err != nil {
		errs = append(errs, fmt.Errorf("protoc-gen-rpr: service %s: (rpr.v1.service).max_backlog %w", s.Desc.FullName(), err))
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
	async := rprOpts.GetAsync()
	if out := m.Output.Desc.FullName(); async && out != emptyMessage {
		return nil, fmt.Errorf("protoc-gen-rpr: %s is marked (rpr.v1.method).async but returns %s; an async method's caller gets a receipt, not a reply, so it must return %s (import \"google/protobuf/empty.proto\" and declare returns (google.protobuf.Empty)), or drop async to make it a unary call",
			name, out, emptyMessage)
	}
	timeout, err := tunnel.DurationOption(rprOpts.GetTimeout())
	if err != nil {
		return nil, fmt.Errorf("protoc-gen-rpr: %s: (rpr.v1.method).timeout %w", name, err)
	}
	// A zero timeout counts as unset, as proto3 zero values do: the
	// service's timeout applies.
	if timeout == 0 {
		timeout = serviceTimeout
	}

	var retry *tunnel.RetryPolicy
	if p := rprOpts.GetRetry(); p != nil {
		if retry, err = tunnel.RetryPolicyOption(p, rprOpts.GetAsync()); err != nil {
			return nil, fmt.Errorf("protoc-gen-rpr: %s: (rpr.v1.method).retry: %w", name, err)
		}
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
		async:      async,
	}, nil
}
