package main

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/compiler/protogen"

	"github.com/rprtunnel/rpr/internal/protoopts"
)

// service is a proto service with what its options say, checked: everything
// the generator needs beyond protogen's view of the service.
type service struct {
	*protogen.Service
	names   serviceNames
	opts    protoopts.Service
	methods []*method
}

// method is a proto method with what its options say, checked.
type method struct {
	*protogen.Method
	opts     protoopts.Method
	names    methodNames
	fullName string // "pkg.Service/Method"
	kind     streamKind
}

// streamKind says which sides of a method stream.
type streamKind int

const (
	unary           streamKind = iota // neither side streams (async methods too)
	serverStreaming                   // rpc Watch(Req) returns (stream Res)
	clientStreaming                   // rpc Upload(stream Req) returns (Res)
	bidiStreaming                     // rpc Chat(stream Req) returns (stream Res)
)

// kindOf returns the stream kind of m.
func kindOf(m *protogen.Method) streamKind {
	switch client, server := m.Desc.IsStreamingClient(), m.Desc.IsStreamingServer(); {
	case client && server:
		return bidiStreaming
	case client:
		return clientStreaming
	case server:
		return serverStreaming
	}
	return unary
}

// loadService reads and checks the options of s and its methods. It returns
// every problem it finds, not only the first, so one run of the plugin shows
// all that needs fixing.
func loadService(s *protogen.Service) (*service, error) {
	var errs []error
	opts, err := protoopts.ReadService(s.Desc)
	if err != nil {
		errs = append(errs, prefixed(err))
	}
	svc := &service{Service: s, names: namesOfService(s), opts: opts}
	for _, m := range s.Methods {
		meth, err := loadMethod(m, opts)
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

// loadMethod reads and checks the options of m, a method of a service whose
// options are svc.
func loadMethod(m *protogen.Method, svc protoopts.Service) (*method, error) {
	// ReadMethod refuses async methods that stream.
	opts, err := protoopts.ReadMethod(m.Desc, svc)
	if err != nil {
		return nil, prefixed(err)
	}
	return &method{
		Method:   m,
		opts:     opts,
		names:    namesOfMethod(m.Parent, m),
		fullName: protoopts.FullMethodName(m.Desc),
		kind:     kindOf(m),
	}, nil
}

// prefixed puts the plugin's name in front of each of err's problems.
func prefixed(err error) error {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		errs := joined.Unwrap()
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = fmt.Errorf("protoc-gen-rpr: %w", e)
		}
		return errors.Join(out...)
	}
	return fmt.Errorf("protoc-gen-rpr: %w", err)
}
