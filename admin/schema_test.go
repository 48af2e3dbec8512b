package admin_test

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
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	rprv1 "github.com/rprtunnel/rpr/gen/rpr/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// registryService is a service whose descriptor the test registers in
// protoregistry.GlobalFiles, as generated code would, so that a server
// publishes its schema; the tests stay independent of gen/'s examples.
const registryService = "rprtest.registry.v1.Registry"

var registerRegistryFile = sync.OnceValue(func() error {
	methodOpts := &descriptorpb.MethodOptions{IdempotencyLevel: descriptorpb.MethodOptions_IDEMPOTENT.Enum()}
	proto.SetExtension(methodOpts, rprv1.E_Method, &rprv1.MethodOptions{Timeout: durationpb.New(3 * time.Second)})
	svcOpts := &descriptorpb.ServiceOptions{}
	proto.SetExtension(svcOpts, rprv1.E_Service, &rprv1.ServiceOptions{BizCode: "RGS1"})
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
			},
		}},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		return err
	}
	return protoregistry.GlobalFiles.RegisterFile(fd)
})

// registryDesc is the hand-written ServiceDesc of registryService; Echo
// answers its input.
func registryDesc() *tunnel.ServiceDesc {
	info := &tunnel.ServiceInfo{Name: registryService}
	return &tunnel.ServiceDesc{
		Service: info,
		Methods: []tunnel.MethodDesc{{
			Service: info,
			Name:    "Echo",
			Handler: func(_ any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
				in := new(wrapperspb.StringValue)
				if err := decode(in); err != nil {
					return nil, err
				}
				return in, nil
			},
		}},
		File: "rprtest/registry/v1/registry.proto",
	}
}

// startRegistry serves registryService (which has a descriptor, so its
// schema is published) and lanesService (which has none) on rdb, and
// returns once the server beats.
func startRegistry(t *testing.T, rs *redistest.Server) {
	t.Helper()
	if err := registerRegistryFile(); err != nil {
		t.Fatal(err)
	}
	rdb := rs.Client(t)
	server, err := tunnel.NewServer(rdb, tunnel.ServerOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	server.RegisterService(registryDesc(), struct{}{})
	server.RegisterService(lanesDesc(0), &laneServer{lane: tunnel.DefaultLane, runs: map[string]int{}})
	serve(t, server, "registry")
	waitFor(t, "the registry server live", func() bool {
		h, err := handle(rdb).Service(registryService).Health(context.Background())
		return err == nil && h.Serving()
	})
}

// TestServicesAndSchemaFiles: Services finds a service by its published
// schema and one by its heartbeats alone; SchemaFiles builds the schema
// from Redis with every import; Schema of a service without one wraps
// ErrNoSchema.
func TestServicesAndSchemaFiles(t *testing.T) {
	rs := redistest.Start(t)
	startRegistry(t, rs)
	rdb := rs.Client(t)
	ctx := context.Background()
	a := handle(rdb)

	names, err := a.Services(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{registryService, lanesService}; !slices.Equal(names, want) {
		t.Errorf("Services = %q, want %q", names, want)
	}
	// MATCH wildcards in a prefix are taken literally.
	if names, err := admin.New(rdb, admin.Options{Prefix: "rpr:v*:"}).Services(ctx); err != nil || len(names) != 0 {
		t.Errorf(`Services under prefix "rpr:v*:" = %q, %v; want nothing`, names, err)
	}

	if _, err := a.Service(lanesService).Schema(ctx); !errors.Is(err, admin.ErrNoSchema) || !strings.Contains(err.Error(), "start a server") {
		t.Errorf("Schema(%s) error = %v; want ErrNoSchema saying to start a server", lanesService, err)
	}

	files, err := a.Service(registryService).SchemaFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"rprtest/registry/v1/registry.proto", "google/protobuf/wrappers.proto", "rpr/v1/options.proto", "google/protobuf/descriptor.proto", "google/protobuf/duration.proto"} {
		if _, err := files.FindFileByPath(path); err != nil {
			t.Errorf("schema lacks %s (imports must be included transitively): %v", path, err)
		}
	}
	sd, err := admin.ServiceInFiles(files, registryService)
	if err != nil {
		t.Fatal(err)
	}
	global, _ := protoregistry.GlobalFiles.FindDescriptorByName(registryService)
	if sd == global {
		t.Fatal("SchemaFiles returned the linked descriptor, not one built from Redis")
	}
	if loaded, err := a.Service(registryService).Schema(ctx); err != nil || loaded.FullName() != registryService || loaded.Methods().ByName("Echo") == nil {
		t.Errorf("Schema(%s) = %v, %v; want the service with its method Echo", registryService, loaded, err)
	}
	if _, err := admin.ServiceInFiles(files, "rprtest.registry.v1.Missing"); err == nil || !strings.Contains(err.Error(), "no service") {
		t.Errorf("ServiceInFiles of a service the schema lacks: %v; want an error saying so", err)
	}
}

func TestSchemaRejectsGarbage(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	if err := rdb.Set(ctx, tunnel.DefaultPrefix+"{x.v1.Bad}:schema", "not a descriptor set \xff", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := handle(rdb).Service("x.v1.Bad").Schema(ctx)
	if err == nil || errors.Is(err, admin.ErrNoSchema) || !strings.Contains(err.Error(), "publish it again") {
		t.Errorf("Schema of garbage: %v; want an error saying to republish", err)
	}
	names, err := handle(rdb).Services(ctx)
	if err != nil || !slices.Equal(names, []string{"x.v1.Bad"}) {
		t.Errorf("Services = %q, %v; want the service of the schema key", names, err)
	}
}
