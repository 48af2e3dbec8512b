package tunnel_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	rprv1 "github.com/rprtunnel/rpr/gen/rpr/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

// registryService is a service whose descriptor the test registers in
// protoregistry.GlobalFiles, as generated code would, so that a server
// publishes its schema; the runtime's tests stay independent of gen/.
const registryService = "rprtest.registry.v1.Registry"

var registerRegistryFile = sync.OnceValue(func() error {
	methodOpts := &descriptorpb.MethodOptions{IdempotencyLevel: descriptorpb.MethodOptions_IDEMPOTENT.Enum()}
	proto.SetExtension(methodOpts, rprv1.E_Method, &rprv1.MethodOptions{
		Timeout: durationpb.New(3 * time.Second),
		Retry:   &rprv1.RetryPolicy{MaxAttempts: 4, RetryableCodes: []string{"UNAVAILABLE", "ABORTED"}},
	})
	svcOpts := &descriptorpb.ServiceOptions{}
	proto.SetExtension(svcOpts, rprv1.E_Service, &rprv1.ServiceOptions{Timeout: durationpb.New(7 * time.Second), BizCode: "RGS1"})
	fdp := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("rprtest/registry/v1/registry.proto"),
		Package:    proto.String("rprtest.registry.v1"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"google/protobuf/wrappers.proto", "rpr/v1/options.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name:    proto.String("Registry"),
			Options: svcOpts,
			Method: []*descriptorpb.MethodDescriptorProto{
				{Name: proto.String("Echo"), InputType: proto.String(".google.protobuf.StringValue"), OutputType: proto.String(".google.protobuf.StringValue"), Options: methodOpts},
				{Name: proto.String("Plain"), InputType: proto.String(".google.protobuf.StringValue"), OutputType: proto.String(".google.protobuf.StringValue")},
			},
		}},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		return err
	}
	return protoregistry.GlobalFiles.RegisterFile(fd)
})

// registryDesc is the hand-written ServiceDesc of registryService; the
// methods answer "<method>: <input>".
func registryDesc() *tunnel.ServiceDesc {
	info := &tunnel.ServiceInfo{Name: registryService}
	m := func(name string) tunnel.MethodDesc {
		return tunnel.MethodDesc{
			Service: info,
			Name:    name,
			Handler: func(_ any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
				in := new(wrapperspb.StringValue)
				if err := decode(in); err != nil {
					return nil, err
				}
				return wrapperspb.String(name + ": " + in.GetValue()), nil
			},
		}
	}
	return &tunnel.ServiceDesc{
		Service: info,
		Methods: []tunnel.MethodDesc{m("Echo"), m("Plain")},
		File:    "rprtest/registry/v1/registry.proto",
	}
}

// TestSchemaPublishedAndCalledDynamically checks the whole registry path:
// a server publishes the schema of the service it has a descriptor for
// (and skips, with a debug line, the one it has none for); the operator
// handle loads the service from Redis; MethodDescFor reads the options;
// and a call made with dynamicpb messages of the loaded schema succeeds.
func TestSchemaPublishedAndCalledDynamically(t *testing.T) {
	if err := registerRegistryFile(); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envConfig{noServe: true})
	e.server.RegisterService(registryDesc(), struct{}{})
	e.serve()
	ctx := context.Background()

	if lines := e.logs.Lines("not publishing a schema"); len(lines) != 1 || !strings.Contains(lines[0], echoService) {
		t.Errorf("want one debug line about skipping %s, got %q", echoService, lines)
	}

	// The schema comes back from Redis alone (admin's tests check its
	// files and the service listing).
	sd, err := admin.New(e.rdb, admin.Options{}).Service(registryService).Schema(ctx)
	if err != nil {
		t.Fatal(err)
	}

	echo, err := tunnel.MethodDescFor(sd.Methods().ByName("Echo"))
	if err != nil {
		t.Fatal(err)
	}
	if echo.Service.Name != registryService || echo.Name != "Echo" || echo.Timeout != 3*time.Second || !echo.Idempotent || echo.Service.BizCode != "RGS1" ||
		echo.Retry == nil || echo.Retry.MaxAttempts != 4 || !slices.Equal(echo.Retry.RetryableCodes, []tunnel.Code{tunnel.Unavailable, tunnel.Aborted}) {
		t.Errorf("MethodDescFor(Echo) = %+v (retry %+v)", echo, echo.Retry)
	}
	plain, err := tunnel.MethodDescFor(sd.Methods().ByName("Plain"))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Timeout != 7*time.Second || plain.Idempotent || plain.Retry != nil {
		t.Errorf("MethodDescFor(Plain) = %+v; want the service's 7s timeout, not idempotent, no retry", plain)
	}

	// Call with messages of the schema's own types, not wrapperspb.
	md := sd.Methods().ByName("Echo")
	req := dynamicpb.NewMessage(md.Input())
	req.Set(md.Input().Fields().ByName("value"), protoreflect.ValueOfString("hi"))
	reply := dynamicpb.NewMessage(md.Output())
	if err := e.client.Invoke(ctx, echo, req, reply); err != nil {
		t.Fatal(err)
	}
	if got := reply.Get(md.Output().Fields().ByName("value")).String(); got != "Echo: hi" {
		t.Errorf("reply = %q, want %q", got, "Echo: hi")
	}
}

// TestSchemaCarriesComments checks that a server publishes the .proto
// comments of ServiceDesc.SourceInfo with the schema, and that comments
// that do not fit the descriptor are left out, with a warning, rather than
// making the schema unreadable.
func TestSchemaCarriesComments(t *testing.T) {
	if err := registerRegistryFile(); err != nil {
		t.Fatal(err)
	}
	encode := func(locs ...*descriptorpb.SourceCodeInfo_Location) string {
		raw, err := proto.Marshal(&descriptorpb.SourceCodeInfo{Location: locs})
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	publish := func(t *testing.T, sourceInfo string) (protoreflect.ServiceDescriptor, *env) {
		e := newEnv(t, envConfig{noServe: true})
		desc := registryDesc()
		desc.SourceInfo = sourceInfo
		e.server.RegisterService(desc, struct{}{})
		e.serve()
		sd, err := admin.New(e.rdb, admin.Options{}).Service(registryService).Schema(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return sd, e
	}
	comment := func(d protoreflect.Descriptor) string {
		return d.ParentFile().SourceLocations().ByDescriptor(d).LeadingComments
	}

	t.Run("published", func(t *testing.T) {
		sd, _ := publish(t, encode(
			&descriptorpb.SourceCodeInfo_Location{Path: []int32{6, 0}, Span: []int32{3, 0, 9, 1}, LeadingComments: proto.String(" Registry echoes.\n")},
			&descriptorpb.SourceCodeInfo_Location{Path: []int32{6, 0, 2, 0}, Span: []int32{5, 2, 40}, LeadingComments: proto.String(" Echo answers.\n")},
		))
		if got := comment(sd); got != " Registry echoes.\n" {
			t.Errorf("the service's comment in the published schema is %q", got)
		}
		if got := comment(sd.Methods().ByName("Echo")); got != " Echo answers.\n" {
			t.Errorf("Echo's comment in the published schema is %q", got)
		}
	})
	t.Run("not fitting", func(t *testing.T) {
		sd, e := publish(t, encode(
			&descriptorpb.SourceCodeInfo_Location{Path: []int32{6, 0}, Span: []int32{3}, LeadingComments: proto.String(" a bad span\n")},
		))
		if got := comment(sd); got != "" {
			t.Errorf("the service's comment in the published schema is %q, want none", got)
		}
		if lines := e.logs.Lines("without its .proto comments"); len(lines) != 1 || !strings.Contains(lines[0], registryService) {
			t.Errorf("want one warning about the comments of %s, got %q", registryService, lines)
		}
	})
}
