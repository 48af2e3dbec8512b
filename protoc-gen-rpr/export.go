package main

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	rprv1 "github.com/rprtunnel/rpr/gen/rpr/v1"
)

// A user's .proto files import "rpr/v1/options.proto". The plugin carries
// that file, so that it reaches the user's include path from the very module
// version their go.mod pins for the runtime (the plugin and the runtime are
// one module): `protoc-gen-rpr --export-proto DIR` writes it out. Its Go
// code is github.com/rprtunnel/rpr/gen/rpr/v1, in the runtime module, so
// users generate only their own files.
//
// include/rpr/v1/options.proto is a byte-for-byte copy of
// proto/rpr/v1/options.proto (go:embed cannot reach outside this
// directory); TestEmbeddedOptionsProto fails when they differ.
//
//go:generate cp ../proto/rpr/v1/options.proto include/rpr/v1/options.proto
//go:embed include/rpr/v1/options.proto
var include embed.FS

// optionsProto is the import path of rpr's options in .proto files.
const optionsProto = "rpr/v1/options.proto"

// rprModule is the module the plugin, the runtime and gen/rpr/v1 belong to.
const rprModule = "github.com/rprtunnel/rpr"

// rprModuleVersion returns the version of the rpr module this binary was built
// from: "v1.2.3" when built as a tool of another module (`go tool
// protoc-gen-rpr`) or by `go install ...@v1.2.3`; "(devel)" when built in a
// checkout of rpr or from a module replaced by a directory.
func rprModuleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	mods := append([]*debug.Module{&info.Main}, info.Deps...)
	for _, m := range mods {
		if m.Path != rprModule {
			continue
		}
		if r := m.Replace; r != nil {
			if r.Version == "" {
				return "(devel)" // replaced by a directory
			}
			return r.Version
		}
		if m.Version == "" {
			return "(devel)"
		}
		return m.Version
	}
	return "(devel)"
}

// runExport is `protoc-gen-rpr --export-proto DIR`: it writes the file
// (exportProto), says where, and returns the exit code. args are the
// arguments after the flags; there must be none.
func runExport(dir string, args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(os.Stderr, "protoc-gen-rpr: unexpected argument %q after --export-proto %s: "+
			"it takes one directory (put other flags before it)\n", args[0], dir)
		return 2
	}
	path, err := exportProto(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "protoc-gen-rpr:", err)
		return 1
	}
	fmt.Printf("wrote %s (%s %s)\n", path, rprModule, rprModuleVersion())
	return 0
}

// exportProto writes rpr/v1/options.proto under dir (creating directories)
// and returns the path written.
func exportProto(dir string) (string, error) {
	src, err := include.ReadFile("include/" + optionsProto)
	if err != nil {
		return "", fmt.Errorf("--export-proto: the embedded %s: %w", optionsProto, err)
	}
	path := filepath.Join(dir, filepath.FromSlash(optionsProto))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("--export-proto: %w", err)
	}
	header := fmt.Sprintf("// Exported by protoc-gen-rpr from %s %s. DO NOT EDIT.\n"+
		"// Export it again after upgrading rpr:\n"+
		"//   go tool protoc-gen-rpr --export-proto %s\n"+
		"// Do not generate code for it: its Go package is %s/gen/rpr/v1,\n"+
		"// part of the runtime you already depend on.\n\n",
		rprModule, rprModuleVersion(), filepath.ToSlash(dir), rprModule)
	if err := os.WriteFile(path, append([]byte(header), src...), 0o644); err != nil {
		return "", fmt.Errorf("--export-proto: %w", err)
	}
	return path, nil
}

// checkOptionsProto refuses to generate code against an rpr/v1/options.proto
// that differs from the one this plugin (and the runtime of the same module
// version) was built with: an export left behind by an upgrade of rpr, or a
// hand-made copy. It compares descriptors, so comments and formatting do not
// count. When options.proto is itself being generated (rpr's own repository)
// it is the source, and nothing is checked.
func checkOptionsProto(gen *protogen.Plugin) error {
	var got *descriptorpb.FileDescriptorProto
	for _, f := range gen.Request.GetProtoFile() {
		if f.GetName() == optionsProto {
			got = f
		}
	}
	if got == nil {
		return nil // no file imports rpr's options
	}
	for _, name := range gen.Request.GetFileToGenerate() {
		if name == optionsProto {
			return nil
		}
	}
	want := protodesc.ToFileDescriptorProto(rprv1.File_rpr_v1_options_proto)
	if proto.Equal(normalized(got), normalized(want)) {
		return nil
	}
	return fmt.Errorf("%s on the include path differs from the one of %s %s, which this protoc-gen-rpr "+
		"and the runtime it generates for come from: export it again with `go tool protoc-gen-rpr --export-proto DIR` "+
		"(DIR: the include directory holding rpr/v1/options.proto, e.g. third_party/rpr-proto), "+
		"and run protoc-gen-rpr as a tool of your module (go tool), so that it is the version your go.mod requires",
		optionsProto, rprModule, rprModuleVersion())
}

// normalized returns a copy of f without what compilers fill in
// differently: source locations and comments, JSON names (protoc and buf
// set them in requests; protoc-gen-go's embedded descriptors may not), and
// unknown fields (buf's image adds some of its own).
func normalized(f *descriptorpb.FileDescriptorProto) *descriptorpb.FileDescriptorProto {
	f = proto.CloneOf(f)
	f.SourceCodeInfo = nil
	clearFields := func(fields []*descriptorpb.FieldDescriptorProto) {
		for _, fd := range fields {
			fd.JsonName = nil
		}
	}
	var clearMessages func(msgs []*descriptorpb.DescriptorProto)
	clearMessages = func(msgs []*descriptorpb.DescriptorProto) {
		for _, m := range msgs {
			clearFields(m.Field)
			clearFields(m.Extension)
			clearMessages(m.NestedType)
		}
	}
	clearFields(f.Extension)
	clearMessages(f.MessageType)
	clearUnknown(f.ProtoReflect())
	return f
}

// clearUnknown drops the unknown fields of m and of every message in it.
func clearUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil || fd.IsMap():
		case fd.IsList():
			for i, list := 0, v.List(); i < list.Len(); i++ {
				clearUnknown(list.Get(i).Message())
			}
		default:
			clearUnknown(v.Message())
		}
		return true
	})
}
