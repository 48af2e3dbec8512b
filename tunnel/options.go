package tunnel

import (
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rprtunnel/rpr/internal/protoopts"
)

// MethodDescFor returns the MethodDesc of md for Client.Invoke (or, for an
// async method, Client.Enqueue, and for a streaming method,
// Client.NewStream), with what generated code would put there: Idempotent
// from idempotency_level, Timeout from (rpr.v1.method).timeout else
// (rpr.v1.service).timeout, Retry from (rpr.v1.method).retry, Async from
// (rpr.v1.method).async, ClientStreams and ServerStreams from the stream
// keywords, and a ServiceInfo from (rpr.v1.service). Handler and
// StreamHandler stay nil: the descriptor is for calling, not serving.
// With a descriptor from a published schema and dynamicpb messages, it
// calls a service whose Go types the program does not have. Async methods
// that stream or whose output is not google.protobuf.Empty are refused, as
// protoc-gen-rpr refuses them.
func MethodDescFor(md protoreflect.MethodDescriptor) (*MethodDesc, error) {
	sd, ok := md.Parent().(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("rpr: method %s has no service", md.FullName())
	}
	svcOpts, err := protoopts.ReadService(sd)
	if err != nil {
		return nil, fmt.Errorf("rpr: %w", err)
	}
	opts, err := protoopts.ReadMethod(md, svcOpts)
	if err != nil {
		return nil, fmt.Errorf("rpr: %w", err)
	}
	desc := &MethodDesc{
		Service: &ServiceInfo{
			Name:       string(sd.FullName()),
			BizCode:    svcOpts.BizCode,
			MaxBacklog: svcOpts.MaxBacklog,
			Shards:     svcOpts.Shards,
		},
		Name:       string(md.Name()),
		Timeout:    opts.Timeout,
		Idempotent: opts.Idempotent,
		Async:      opts.Async,

		ClientStreams: md.IsStreamingClient(),
		ServerStreams: md.IsStreamingServer(),
	}
	if r := opts.Retry; r != nil {
		desc.Retry = &RetryPolicy{
			MaxAttempts:    r.MaxAttempts,
			InitialBackoff: r.InitialBackoff,
			MaxBackoff:     r.MaxBackoff,
			Multiplier:     r.Multiplier,
		}
		for _, name := range r.RetryableCodes {
			code, _ := ParseCode(name) // protoopts checked the names
			desc.Retry.RetryableCodes = append(desc.Retry.RetryableCodes, code)
		}
	}
	return desc, nil
}
