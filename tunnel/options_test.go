package tunnel_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"
	_ "google.golang.org/protobuf/types/known/emptypb"
	_ "google.golang.org/protobuf/types/known/wrapperspb"

	rprv1 "github.com/rprtunnel/rpr/gen/rpr/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

// optionsMethod is one method of the service optionsService builds.
type optionsMethod struct {
	name   string
	output string // full name of the output type, with the leading dot
	opts   *rprv1.MethodOptions
	// clientStreams and serverStreams put the stream keyword before the
	// input and the output.
	clientStreams, serverStreams bool
}

// optionsService builds, without registering it anywhere, a service with
// the given service options and methods (input google.protobuf.Empty), as
// LoadSchema would build it from Redis.
func optionsService(t *testing.T, svc *rprv1.ServiceOptions, methods ...optionsMethod) protoreflect.ServiceDescriptor {
	t.Helper()
	svcOpts := &descriptorpb.ServiceOptions{}
	if svc != nil {
		proto.SetExtension(svcOpts, rprv1.E_Service, svc)
	}
	sdp := &descriptorpb.ServiceDescriptorProto{Name: proto.String("Options"), Options: svcOpts}
	for _, m := range methods {
		methodOpts := &descriptorpb.MethodOptions{}
		if m.opts != nil {
			proto.SetExtension(methodOpts, rprv1.E_Method, m.opts)
		}
		mdp := &descriptorpb.MethodDescriptorProto{
			Name:       proto.String(m.name),
			InputType:  proto.String(".google.protobuf.Empty"),
			OutputType: proto.String(m.output),
			Options:    methodOpts,
		}
		if m.clientStreams {
			mdp.ClientStreaming = proto.Bool(true)
		}
		if m.serverStreams {
			mdp.ServerStreaming = proto.Bool(true)
		}
		sdp.Method = append(sdp.Method, mdp)
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:       proto.String("rprtest/options/v1/options.proto"),
		Package:    proto.String("rprtest.options.v1"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"google/protobuf/empty.proto", "google/protobuf/wrappers.proto", "rpr/v1/options.proto"},
		Service:    []*descriptorpb.ServiceDescriptorProto{sdp},
	}, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Services().Get(0)
}

func TestMethodDescForAsync(t *testing.T) {
	sd := optionsService(t,
		&rprv1.ServiceOptions{BizCode: "MAIL", MaxBacklog: 5000, Timeout: durationpb.New(2 * time.Second)},
		optionsMethod{name: "Send", output: ".google.protobuf.Empty", opts: &rprv1.MethodOptions{
			Async: true,
			Retry: &rprv1.RetryPolicy{MaxAttempts: 12},
		}},
		optionsMethod{name: "Lookup", output: ".google.protobuf.StringValue"},
	)

	send, err := tunnel.MethodDescFor(sd.Methods().ByName("Send"))
	if err != nil {
		t.Fatal(err)
	}
	if send.Service.Name != "rprtest.options.v1.Options" || send.Name != "Send" || !send.Async || send.Service.MaxBacklog != 5000 ||
		send.Service.BizCode != "MAIL" || send.Timeout != 2*time.Second || send.Retry == nil || send.Retry.MaxAttempts != 12 {
		t.Errorf("MethodDescFor(Send) = %+v (retry %+v); want async, max backlog 5000, biz code MAIL, 2s, 12 attempts", send, send.Retry)
	}

	// max_backlog is a service option: every method gets it, async or not.
	lookup, err := tunnel.MethodDescFor(sd.Methods().ByName("Lookup"))
	if err != nil {
		t.Fatal(err)
	}
	if lookup.Async || lookup.Service.MaxBacklog != 5000 {
		t.Errorf("MethodDescFor(Lookup) = %+v; want not async, max backlog 5000", lookup)
	}
}

func TestMethodDescForMaxBacklogUnset(t *testing.T) {
	sd := optionsService(t, nil, optionsMethod{name: "Send", output: ".google.protobuf.Empty", opts: &rprv1.MethodOptions{Async: true}})
	send, err := tunnel.MethodDescFor(sd.Methods().ByName("Send"))
	if err != nil {
		t.Fatal(err)
	}
	if !send.Async || send.Service.MaxBacklog != 0 || send.Retry != nil {
		t.Errorf("MethodDescFor(Send) = %+v; want async with MaxBacklog 0 (the client's default) and no retry policy", send)
	}
}

func TestMethodDescForRefuses(t *testing.T) {
	tests := []struct {
		name   string
		svc    *rprv1.ServiceOptions
		method optionsMethod
		want   string
	}{
		{
			name:   "async method with a reply",
			method: optionsMethod{name: "Send", output: ".google.protobuf.StringValue", opts: &rprv1.MethodOptions{Async: true}},
			want:   "rpr: rprtest.options.v1.Options/Send is marked (rpr.v1.method).async but returns google.protobuf.StringValue; an async method's caller gets a receipt, not a reply, so it must return google.protobuf.Empty",
		},
		{
			name:   "async server-streaming",
			method: optionsMethod{name: "Watch", output: ".google.protobuf.Empty", serverStreams: true, opts: &rprv1.MethodOptions{Async: true}},
			want:   "rpr: rprtest.options.v1.Options/Watch is marked (rpr.v1.method).async but is a server-streaming method; an async request waits in a queue with no caller attached, so no stream can cross it: drop async to make it a streaming call, or remove the stream keyword to make it an async method",
		},
		{
			name:   "async client-streaming",
			method: optionsMethod{name: "Feed", output: ".google.protobuf.Empty", clientStreams: true, opts: &rprv1.MethodOptions{Async: true}},
			want:   "rpr: rprtest.options.v1.Options/Feed is marked (rpr.v1.method).async but is a client-streaming method",
		},
		{
			name:   "async bidirectional with a reply",
			method: optionsMethod{name: "Chat", output: ".google.protobuf.StringValue", clientStreams: true, serverStreams: true, opts: &rprv1.MethodOptions{Async: true}},
			want:   "rpr: rprtest.options.v1.Options/Chat is marked (rpr.v1.method).async but is a bidirectional streaming method",
		},
		{
			name:   "max_backlog beyond int64",
			svc:    &rprv1.ServiceOptions{MaxBacklog: math.MaxInt64 + 1},
			method: optionsMethod{name: "Send", output: ".google.protobuf.Empty", opts: &rprv1.MethodOptions{Async: true}},
			want:   "rpr: service rprtest.options.v1.Options: (rpr.v1.service).max_backlog of 9223372036854775808 is more than an int64 can hold",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sd := optionsService(t, tt.svc, tt.method)
			desc, err := tunnel.MethodDescFor(sd.Methods().Get(0))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("MethodDescFor = %+v, %v; want an error containing %q", desc, err, tt.want)
			}
		})
	}
}

func TestMethodDescForStreaming(t *testing.T) {
	sd := optionsService(t,
		&rprv1.ServiceOptions{BizCode: "WTCH", Timeout: durationpb.New(time.Minute)},
		optionsMethod{name: "Watch", output: ".google.protobuf.StringValue", serverStreams: true,
			opts: &rprv1.MethodOptions{Timeout: durationpb.New(time.Hour)}},
		optionsMethod{name: "Upload", output: ".google.protobuf.StringValue", clientStreams: true},
		optionsMethod{name: "Chat", output: ".google.protobuf.StringValue", clientStreams: true, serverStreams: true},
		optionsMethod{name: "Get", output: ".google.protobuf.StringValue"},
	)
	for _, want := range []struct {
		name                         string
		clientStreams, serverStreams bool
		timeout                      time.Duration
	}{
		{"Watch", false, true, time.Hour},
		{"Upload", true, false, time.Minute},
		{"Chat", true, true, time.Minute},
		{"Get", false, false, time.Minute},
	} {
		desc, err := tunnel.MethodDescFor(sd.Methods().ByName(protoreflect.Name(want.name)))
		if err != nil {
			t.Errorf("MethodDescFor(%s): %v", want.name, err)
			continue
		}
		if desc.Name != want.name || desc.ClientStreams != want.clientStreams || desc.ServerStreams != want.serverStreams ||
			desc.IsStreaming() != (want.clientStreams || want.serverStreams) || desc.Async || desc.Timeout != want.timeout ||
			desc.Service.BizCode != "WTCH" || desc.Handler != nil || desc.StreamHandler != nil {
			t.Errorf("MethodDescFor(%s) = %+v; want client streams %t, server streams %t, timeout %v, biz code WTCH, no handlers",
				want.name, desc, want.clientStreams, want.serverStreams, want.timeout)
		}
	}
}
