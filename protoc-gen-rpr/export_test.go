package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"

	rprv1 "github.com/rprtunnel/rpr/gen/rpr/v1"
)

// TestEmbeddedOptionsProto checks that the plugin carries the very
// options.proto of this checkout, so that --export-proto gives users the
// file the runtime of the same version was generated from.
func TestEmbeddedOptionsProto(t *testing.T) {
	source, err := os.ReadFile(filepath.Join(repoRoot(t), "proto", "rpr", "v1", "options.proto"))
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := include.ReadFile("include/" + optionsProto)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(source, embedded) {
		t.Fatalf("protoc-gen-rpr/include/rpr/v1/options.proto is not a copy of proto/rpr/v1/options.proto (%s): "+
			"run `go generate ./protoc-gen-rpr` (make generate does) and commit it",
			firstDifference(string(source), string(embedded)))
	}
}

// pluginBinary builds the plugin once per test binary.
func pluginBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(workDir, "protoc-gen-rpr")
	if _, err := os.Stat(bin); err != nil {
		goCommand(t, ".", "build", "-o", bin, ".")
	}
	return bin
}

func runBinary(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(pluginBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestExportProto runs --export-proto as a user does and checks that buf
// compiles what it wrote into the descriptor the runtime registers, which
// is what the plugin then accepts.
func TestExportProto(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "third_party", "rpr-proto")
	stdout, stderr, code := runBinary(t, "--export-proto", dir)
	if code != 0 {
		t.Fatalf("--export-proto exited %d: %s%s", code, stdout, stderr)
	}
	path := filepath.Join(dir, "rpr", "v1", "options.proto")
	if !strings.Contains(stdout, path) {
		t.Errorf("--export-proto printed %q, want the path it wrote (%s)", stdout, path)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	embedded, _ := include.ReadFile("include/" + optionsProto)
	header, body, ok := bytes.Cut(got, []byte("\n\n"))
	if !ok || !bytes.Equal(body, embedded) {
		t.Fatalf("%s is not a header comment followed by options.proto:\n%s", path, got)
	}
	for _, want := range []string{"DO NOT EDIT", "--export-proto", "github.com/rprtunnel/rpr/gen/rpr/v1"} {
		if !bytes.Contains(header, []byte(want)) {
			t.Errorf("the header of %s does not mention %q:\n%s", path, want, header)
		}
	}

	// Exporting again over the first export is fine (an upgrade does it).
	if _, stderr, code := runBinary(t, "--export-proto", dir); code != 0 {
		t.Fatalf("a second --export-proto exited %d: %s", code, stderr)
	}

	image := filepath.Join(t.TempDir(), "image.binpb")
	cmd := exec.Command("go", "tool", "-modfile=tools/go.mod", "buf", "build", dir, "--exclude-source-info", "-o", image)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("buf build of the exported file: %v\n%s", err, out)
	}
	data, err := os.ReadFile(image)
	if err != nil {
		t.Fatal(err)
	}
	set := new(descriptorpb.FileDescriptorSet)
	if err := proto.Unmarshal(data, set); err != nil {
		t.Fatal(err)
	}
	want := normalized(protodesc.ToFileDescriptorProto(rprv1.File_rpr_v1_options_proto))
	for _, f := range set.GetFile() {
		if f.GetName() == optionsProto {
			if !proto.Equal(normalized(f), want) {
				t.Fatalf("the exported %s compiles to another descriptor than gen/rpr/v1's", optionsProto)
			}
			return
		}
	}
	t.Fatalf("buf build of %s has no %s", dir, optionsProto)
}

// TestExportArguments checks that --export-proto takes one directory and
// says so when given more.
func TestExportArguments(t *testing.T) {
	dir := t.TempDir()
	_, stderr, code := runBinary(t, "--export-proto", dir, "proto/acme")
	if code != 2 || !strings.Contains(stderr, `unexpected argument "proto/acme"`) {
		t.Errorf("--export-proto DIR proto/acme: exit %d, %q; want exit 2 and a message naming the argument", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "rpr")); err == nil {
		t.Errorf("--export-proto with an unexpected argument wrote %s/rpr anyway", dir)
	}
}

// TestOptionsProtoDrift checks that the plugin refuses an imported
// rpr/v1/options.proto that is not its own, and accepts one that differs
// only in comments, or that is being generated (rpr's own repository).
func TestOptionsProtoDrift(t *testing.T) {
	const file = "rprtest/basic/v1/basic.proto"
	edit := func(req *pluginpb.CodeGeneratorRequest, change func(*descriptorpb.FileDescriptorProto)) {
		for i, f := range req.ProtoFile {
			if f.GetName() == optionsProto {
				f = proto.CloneOf(f)
				change(f)
				req.ProtoFile[i] = f
				return
			}
		}
		t.Fatalf("the request for %s does not import %s", file, optionsProto)
	}
	dropField := func(f *descriptorpb.FileDescriptorProto) {
		m := f.MessageType[0]
		m.Field = m.Field[:len(m.Field)-1]
	}

	t.Run("stale", func(t *testing.T) {
		req := request(t, "paths=source_relative", file)
		edit(req, dropField)
		resp := runPlugin(t, req)
		for _, want := range []string{optionsProto, "--export-proto", "(devel)"} {
			if !strings.Contains(resp.GetError(), want) {
				t.Errorf("error %q does not mention %q", resp.GetError(), want)
			}
		}
		if len(resp.File) != 0 {
			t.Errorf("the plugin wrote %d files despite the error", len(resp.File))
		}
	})
	t.Run("comments only", func(t *testing.T) {
		req := request(t, "paths=source_relative", file)
		edit(req, func(f *descriptorpb.FileDescriptorProto) {
			f.SourceCodeInfo = &descriptorpb.SourceCodeInfo{Location: []*descriptorpb.SourceCodeInfo_Location{{
				Path: []int32{4, 0}, Span: []int32{1, 0, 10}, LeadingComments: proto.String(" another comment\n"),
			}}}
		})
		generatedFiles(t, runPlugin(t, req))
	})
	t.Run("generated here", func(t *testing.T) {
		req := request(t, "paths=source_relative", file)
		edit(req, dropField)
		req.FileToGenerate = append(req.FileToGenerate, optionsProto)
		generatedFiles(t, runPlugin(t, req))
	})
}
