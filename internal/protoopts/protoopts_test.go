package protoopts

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	_ "google.golang.org/protobuf/types/known/emptypb"

	rprv1 "github.com/rprtunnel/rpr/gen/rpr/v1"
)

// service builds, without registering it, a service with options opts and
// one method Ping (google.protobuf.Empty in and out).
func service(t *testing.T, opts *rprv1.ServiceOptions) protoreflect.ServiceDescriptor {
	t.Helper()
	return serviceWith(t, opts, &descriptorpb.MethodDescriptorProto{
		Name:       proto.String("Ping"),
		InputType:  proto.String(".google.protobuf.Empty"),
		OutputType: proto.String(".google.protobuf.Empty"),
	})
}

// serviceWith builds, without registering it, a service with options opts
// and the given methods.
func serviceWith(t *testing.T, opts *rprv1.ServiceOptions, methods ...*descriptorpb.MethodDescriptorProto) protoreflect.ServiceDescriptor {
	t.Helper()
	svcOpts := &descriptorpb.ServiceOptions{}
	proto.SetExtension(svcOpts, rprv1.E_Service, opts)
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:       proto.String("rprtest/protoopts/v1/protoopts.proto"),
		Package:    proto.String("rprtest.protoopts.v1"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"google/protobuf/empty.proto", "rpr/v1/options.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name:    proto.String("Opts"),
			Options: svcOpts,
			Method:  methods,
		}},
	}, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Services().Get(0)
}

func TestMaxBacklog(t *testing.T) {
	for _, tt := range []struct {
		in      uint64
		want    int64
		wantErr bool
	}{
		{0, 0, false},
		{1, 1, false},
		{math.MaxInt64, math.MaxInt64, false},
		{math.MaxInt64 + 1, 0, true},
		{math.MaxUint64, 0, true},
	} {
		got, err := ReadService(service(t, &rprv1.ServiceOptions{MaxBacklog: tt.in}))
		if got.MaxBacklog != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("max_backlog %d: MaxBacklog %d, err %v; want %d, error %t", tt.in, got.MaxBacklog, err, tt.want, tt.wantErr)
		}
	}
}

func TestRetryAttemptsLimit(t *testing.T) {
	for _, c := range []struct {
		attempts uint32
		async    bool
		ok       bool
	}{{100, false, true}, {101, false, false}, {500, true, true}, {1001, true, false}} {
		_, err := retry(&rprv1.RetryPolicy{MaxAttempts: c.attempts}, c.async)
		if (err == nil) != c.ok {
			t.Errorf("max_attempts %d, async %t: err %v, want ok=%t", c.attempts, c.async, err, c.ok)
		}
	}
}

func TestRetryCodes(t *testing.T) {
	got, err := retry(&rprv1.RetryPolicy{RetryableCodes: []string{"UNAVAILABLE", "8"}}, false)
	if err != nil || strings.Join(got.RetryableCodes, ",") != "UNAVAILABLE,RESOURCE_EXHAUSTED" {
		t.Errorf("retryable_codes UNAVAILABLE, 8: %+v, %v; want the canonical names", got, err)
	}
	for _, bad := range []string{"OK", "0", "UNAVAILBLE", "17"} {
		if _, err := retry(&rprv1.RetryPolicy{RetryableCodes: []string{bad}}, false); err == nil || !strings.Contains(err.Error(), "is not a status code") {
			t.Errorf("retryable_codes %q: err %v, want it refused", bad, err)
		}
	}
}

func TestStreamingMethods(t *testing.T) {
	method := func(name string, clientStreams, serverStreams, async bool) *descriptorpb.MethodDescriptorProto {
		opts := &descriptorpb.MethodOptions{}
		proto.SetExtension(opts, rprv1.E_Method, &rprv1.MethodOptions{Async: async})
		return &descriptorpb.MethodDescriptorProto{
			Name:            proto.String(name),
			InputType:       proto.String(".google.protobuf.Empty"),
			OutputType:      proto.String(".google.protobuf.Empty"),
			ClientStreaming: proto.Bool(clientStreams),
			ServerStreaming: proto.Bool(serverStreams),
			Options:         opts,
		}
	}
	sd := serviceWith(t, &rprv1.ServiceOptions{},
		method("Get", false, false, false),
		method("Watch", false, true, false),
		method("Upload", true, false, false),
		method("Chat", true, true, false),
		method("Tail", false, true, true),
		method("Feed", true, false, true),
		method("Talk", true, true, true),
	)
	for _, tt := range []struct {
		name      string
		streaming bool
		kind      string
		err       string
	}{
		{"Get", false, "unary", ""},
		{"Watch", true, "server-streaming", ""},
		{"Upload", true, "client-streaming", ""},
		{"Chat", true, "bidirectional streaming", ""},
		{"Tail", true, "server-streaming", "rprtest.protoopts.v1.Opts/Tail is marked (rpr.v1.method).async but is a server-streaming method; an async request waits in a queue with no caller attached, so no stream can cross it: drop async to make it a streaming call, or remove the stream keyword to make it an async method (which returns google.protobuf.Empty)"},
		{"Feed", true, "client-streaming", "rprtest.protoopts.v1.Opts/Feed is marked (rpr.v1.method).async but is a client-streaming method;"},
		{"Talk", true, "bidirectional streaming", "rprtest.protoopts.v1.Opts/Talk is marked (rpr.v1.method).async but is a bidirectional streaming method;"},
	} {
		md := sd.Methods().ByName(protoreflect.Name(tt.name))
		if IsStreaming(md) != tt.streaming || StreamKind(md) != tt.kind {
			t.Errorf("%s: IsStreaming %t, StreamKind %q; want %t, %q", tt.name, IsStreaming(md), StreamKind(md), tt.streaming, tt.kind)
		}
		_, err := ReadMethod(md, Service{})
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("ReadMethod(%s): %v", tt.name, err)
		case tt.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.err)):
			t.Errorf("ReadMethod(%s) = %v; want an error starting %q", tt.name, err, tt.err)
		}
	}
}
