package tunnel_test

import (
	"context"
	"errors"
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
// (and skips, with a debug line, the one it has none for); ListServices
// finds both; LoadSchema builds the service from Redis alone; MethodDescFor
// reads the options; and a call made with dynamicpb messages of the loaded
// schema succeeds.
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

	names, err := tunnel.ListServices(ctx, e.rdb, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{registryService, echoService}; !slices.Equal(names, want) {
		t.Errorf("ListServices = %q, want %q", names, want)
	}
	// MATCH wildcards in a prefix are taken literally.
	if names, err := tunnel.ListServices(ctx, e.rdb, "rpr:v*:"); err != nil || len(names) != 0 {
		t.Errorf(`ListServices(prefix "rpr:v*:") = %q, %v; want nothing`, names, err)
	}

	if _, err := tunnel.LoadSchema(ctx, e.rdb, "", echoService); !errors.Is(err, tunnel.ErrNoSchema) || !strings.Contains(err.Error(), "start a server") {
		t.Errorf("LoadSchema(%s) error = %v; want ErrNoSchema saying to start a server", echoService, err)
	}

	files, err := tunnel.LoadSchemaFiles(ctx, e.rdb, "", registryService)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"rprtest/registry/v1/registry.proto", "google/protobuf/wrappers.proto", "rpr/v1/options.proto", "google/protobuf/descriptor.proto", "google/protobuf/duration.proto"} {
		if _, err := files.FindFileByPath(path); err != nil {
			t.Errorf("schema lacks %s (imports must be included transitively): %v", path, err)
		}
	}
	sd, err := tunnel.ServiceInFiles(files, registryService)
	if err != nil {
		t.Fatal(err)
	}
	global, _ := protoregistry.GlobalFiles.FindDescriptorByName(registryService)
	if sd == global {
		t.Fatal("LoadSchema returned the linked descriptor, not one built from Redis")
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

func TestLoadSchemaRejectsGarbage(t *testing.T) {
	e := newEnv(t, envConfig{noServe: true})
	ctx := context.Background()
	if err := e.rdb.Set(ctx, tunnel.DefaultPrefix+"{x.v1.Bad}:schema", "not a descriptor set \xff", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := tunnel.LoadSchema(ctx, e.rdb, "", "x.v1.Bad")
	if err == nil || errors.Is(err, tunnel.ErrNoSchema) || !strings.Contains(err.Error(), "publish it again") {
		t.Errorf("LoadSchema of garbage: %v; want an error saying to republish", err)
	}
	names, err := tunnel.ListServices(ctx, e.rdb, "")
	if err != nil || !slices.Equal(names, []string{"x.v1.Bad"}) {
		t.Errorf("ListServices = %q, %v; want the service of the schema key", names, err)
	}
}
