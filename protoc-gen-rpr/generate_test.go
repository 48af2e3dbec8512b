package main

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// The test inputs are the .proto files under testdata/proto. They import
// rpr/v1/options.proto from the repository's proto/ directory, so buf builds
// both directories into one image, once per test binary.

// validFiles are the inputs the plugin must accept; the generated code of
// all of them must compile together.
var validFiles = []string{
	"rprtest/basic/v1/basic.proto",
	"rprtest/common/v1/common.proto",
	"rprtest/context/context.proto",
	"rprtest/editions/v1/editions.proto",
	"rprtest/names/v1/names.proto",
	"rprtest/streaming/v1/names.proto",
	"rprtest/streaming/v1/streaming.proto",
	"rprtest/tunnel/tunnel.proto",
}

// workDir holds what the tests build once and share: the buf image and the
// protoc-gen-go binary.
var workDir string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "protoc-gen-rpr-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// repoRoot returns the repository root; go test runs in this package's
// directory, one level below it.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "tools", "go.mod")); err != nil {
		t.Fatalf("repository root not found: %v", err)
	}
	return root
}

var buildImage = sync.OnceValues(func() (*descriptorpb.FileDescriptorSet, error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return nil, err
	}
	out := filepath.Join(workDir, "image.binpb")
	config := `{"version":"v2","modules":[{"path":"proto"},{"path":"protoc-gen-rpr/testdata/proto"}]}`
	cmd := exec.Command("go", "tool", "-modfile=tools/go.mod", "buf", "build", ".", "--config", config, "-o", out)
	cmd.Dir = root
	// -modfile cannot be used in workspace mode (the repository's go.work).
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if output, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("buf build: %v\n%s", err, output)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	// A buf image is a FileDescriptorSet with extra fields protobuf-go keeps
	// as unknown fields. Its files are in dependency order.
	image := new(descriptorpb.FileDescriptorSet)
	if err := proto.Unmarshal(data, image); err != nil {
		return nil, err
	}
	return image, nil
})

// request returns the CodeGeneratorRequest protoc would send for generating
// files with the given plugin parameter: the files and everything they
// import, in dependency order.
func request(t *testing.T, parameter string, files ...string) *pluginpb.CodeGeneratorRequest {
	t.Helper()
	image, err := buildImage()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*descriptorpb.FileDescriptorProto{}
	for _, f := range image.File {
		byName[f.GetName()] = f
	}
	needed := map[string]bool{}
	var need func(name string)
	need = func(name string) {
		f, ok := byName[name]
		if !ok {
			t.Fatalf("%s is not in the image", name)
		}
		if !needed[name] {
			needed[name] = true
			for _, dep := range f.Dependency {
				need(dep)
			}
		}
	}
	for _, name := range files {
		need(name)
	}
	req := &pluginpb.CodeGeneratorRequest{
		FileToGenerate: files,
		Parameter:      proto.String(parameter),
	}
	for _, f := range image.File {
		if needed[f.GetName()] {
			req.ProtoFile = append(req.ProtoFile, f)
		}
	}
	return req
}

// runPlugin runs the plugin in-process, as protogen.Options.Run would.
func runPlugin(t *testing.T, req *pluginpb.CodeGeneratorRequest) *pluginpb.CodeGeneratorResponse {
	t.Helper()
	gen, err := protogen.Options{}.New(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := generate(gen); err != nil {
		gen.Error(err)
	}
	return gen.Response()
}

// generatedFiles returns the response's files by name; it fails the test if
// the plugin reported an error.
func generatedFiles(t *testing.T, resp *pluginpb.CodeGeneratorResponse) map[string]string {
	t.Helper()
	if resp.Error != nil {
		t.Fatalf("plugin failed: %s", resp.GetError())
	}
	files := map[string]string{}
	for _, f := range resp.File {
		files[f.GetName()] = f.GetContent()
	}
	return files
}

// TestGolden compares the generated code with testdata/golden. Run
// go test ./protoc-gen-rpr -update to rewrite the golden files after an
// intended change, and review the diff.
func TestGolden(t *testing.T) {
	got := generatedFiles(t, runPlugin(t, request(t, "paths=source_relative", validFiles...)))
	goldenDir := filepath.Join("testdata", "golden")

	if *update {
		if err := os.RemoveAll(goldenDir); err != nil {
			t.Fatal(err)
		}
		for name, content := range got {
			path := filepath.Join(goldenDir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}

	want := map[string]string{}
	err := filepath.WalkDir(goldenDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		content, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(goldenDir, path)
		want[filepath.ToSlash(rel)] = string(content)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range sortedKeys(got, want) {
		switch {
		case want[name] == "":
			t.Errorf("%s: generated, but there is no golden file (run go test -update)", name)
		case got[name] == "":
			t.Errorf("%s: golden file, but not generated", name)
		case got[name] != want[name]:
			t.Errorf("%s differs from the golden file (run go test -update and review the diff): %s",
				name, firstDifference(want[name], got[name]))
		}
	}
}

// TestPathsImport checks that paths=import places the same code under the Go
// import path, and that files without services give no file.
func TestPathsImport(t *testing.T) {
	sourceRelative := generatedFiles(t, runPlugin(t, request(t, "paths=source_relative", validFiles...)))
	imports := generatedFiles(t, runPlugin(t, request(t, "paths=import", validFiles...)))

	wantNames := []string{
		"example.com/rprtest/basic/v1/basic_rpr.pb.go",
		"example.com/rprtest/editions/v1/editions_rpr.pb.go",
		"example.com/rprtest/names/v1/names_rpr.pb.go",
		"example.com/rprtest/streaming/v1/names_rpr.pb.go",
		"example.com/rprtest/streaming/v1/streaming_rpr.pb.go",
	}
	if got := sortedKeys(imports); !slices.Equal(got, wantNames) {
		t.Fatalf("paths=import generated %q, want %q", got, wantNames)
	}
	for name, content := range imports {
		relative := strings.TrimPrefix(name, "example.com/")
		if content != sourceRelative[relative] {
			t.Errorf("%s differs from %s generated with paths=source_relative", name, relative)
		}
	}
}

func TestSupportedFeatures(t *testing.T) {
	resp := runPlugin(t, request(t, "", "rprtest/editions/v1/editions.proto"))
	want := uint64(pluginpb.CodeGeneratorResponse_FEATURE_PROTO3_OPTIONAL | pluginpb.CodeGeneratorResponse_FEATURE_SUPPORTS_EDITIONS)
	if resp.GetSupportedFeatures() != want {
		t.Errorf("supported features = %b, want %b", resp.GetSupportedFeatures(), want)
	}
	if got := descriptorpb.Edition(resp.GetMaximumEdition()); got < descriptorpb.Edition_EDITION_2023 {
		t.Errorf("maximum edition = %v, want at least EDITION_2023", got)
	}
}

// TestRefused checks that input the plugin cannot generate code for fails
// with messages that name the method or service and say what to change, and
// that every problem of a file is reported, not only the first.
func TestRefused(t *testing.T) {
	tests := []struct {
		file    string
		want    []string
		notWant []string // methods that are fine, so must not be named
	}{
		{
			file: "rprtest/bad/v1/streaming.proto",
			want: []string{
				"protoc-gen-rpr: rprtest.bad.v1.Streams/Feed is marked (rpr.v1.method).async but is a client-streaming method; an async request waits in a queue with no caller attached, so no stream can cross it: drop async to make it a streaming call, or remove the stream keyword to make it an async method (which returns google.protobuf.Empty)",
				"protoc-gen-rpr: rprtest.bad.v1.Streams/Tail is marked (rpr.v1.method).async but is a server-streaming method;",
				"protoc-gen-rpr: rprtest.bad.v1.Streams/Talk is marked (rpr.v1.method).async but is a bidirectional streaming method;",
			},
			// Streaming methods that are not async are fine; Talk's
			// reply is not the problem to report.
			notWant: []string{"Streams/Unary", "Streams/Upload", "Streams/Watch", "Streams/Chat", "StringValue"},
		},
		{
			file: "rprtest/bad/v1/async.proto",
			want: []string{
				`protoc-gen-rpr: rprtest.bad.v1.Mailer/Send is marked (rpr.v1.method).async but returns google.protobuf.StringValue; an async method's caller gets a receipt, not a reply, so it must return google.protobuf.Empty (import "google/protobuf/empty.proto" and declare returns (google.protobuf.Empty)), or drop async to make it a unary call`,
				"protoc-gen-rpr: rprtest.bad.v1.Mailer/Reply is marked (rpr.v1.method).async but returns rprtest.bad.v1.MailerReply;",
			},
			notWant: []string{"Mailer/Queue"},
		},
		{
			file: "rprtest/bad/v1/bizcode.proto",
			want: []string{
				`protoc-gen-rpr: service rprtest.bad.v1.LowerCase: (rpr.v1.service).biz_code "ord1" must be exactly 4 upper-case letters or digits (A-Z, 0-9)`,
				`protoc-gen-rpr: service rprtest.bad.v1.TooLong: (rpr.v1.service).biz_code "ORDER" must be exactly 4`,
				"protoc-gen-rpr: service rprtest.bad.v1.BadTimeouts: (rpr.v1.service).timeout is negative (-5s)",
				"protoc-gen-rpr: rprtest.bad.v1.BadTimeouts/Huge: (rpr.v1.method).timeout of 315576000000 seconds is longer than a time.Duration can hold",
				`protoc-gen-rpr: rprtest.bad.v1.BadTimeouts/BadRetry: (rpr.v1.method).retry: retryable_codes: "UNAVAILBLE" is not a status code`,
			},
		},
		{
			file: "rprtest/bad/v1/clash.proto",
			want: []string{
				"protoc-gen-rpr: method rprtest.bad.v1.A_B/C and method rprtest.bad.v1.A/B_C both need the Go name _A_B_C_Handler",
				"protoc-gen-rpr: message rprtest.bad.v1.FooClient and service rprtest.bad.v1.Foo both need the Go name FooClient",
				"protoc-gen-rpr: service rprtest.bad.v1.Feed_Watch and method rprtest.bad.v1.Feed/Watch both need the Go name Feed_WatchClient in package \"example.com/rprtest/bad/v1/clash\"; rename one of them",
				"protoc-gen-rpr: service rprtest.bad.v1.Feed_Watch and method rprtest.bad.v1.Feed/Watch both need the Go name Feed_WatchServer",
				"protoc-gen-rpr: message rprtest.bad.v1.Tail_LinesServer and method rprtest.bad.v1.Tail/Lines both need the Go name Tail_LinesServer",
			},
		},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			resp := runPlugin(t, request(t, "paths=source_relative", tt.file))
			if resp.Error == nil {
				t.Fatalf("plugin accepted %s", tt.file)
			}
			for _, want := range tt.want {
				if !strings.Contains(resp.GetError(), want) {
					t.Errorf("error does not contain\n\t%s\nerror:\n%s", want, resp.GetError())
				}
			}
			for _, notWant := range tt.notWant {
				if strings.Contains(resp.GetError(), notWant) {
					t.Errorf("error names %s, which is fine\nerror:\n%s", notWant, resp.GetError())
				}
			}
			if len(resp.File) > 0 {
				t.Errorf("plugin failed but still generated %d files", len(resp.File))
			}
		})
	}
}

// TestGeneratedCodeCompiles generates code with protoc-gen-go and this plugin
// in both path modes, into a module that uses this repository's tunnel
// package, and runs go build and go vet on it. In source_relative mode it
// also runs testdata/compilecheck, which exercises registration (the panic
// for a nil embedded Unimplemented server), the handlers, the service
// descriptors, and the streaming methods over an in-process fake of
// tunnel.ClientConn, tunnel.ClientStream and tunnel.ServerStream.
func TestGeneratedCodeCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Go code; skipped with -short")
	}
	root := repoRoot(t)
	protocGenGo := filepath.Join(workDir, "protoc-gen-go")
	goCommand(t, root, "build", "-modfile=tools/go.mod", "-o", protocGenGo, "google.golang.org/protobuf/cmd/protoc-gen-go")

	tests := []struct {
		parameter string
		moduleDir string // where the module example.com/rprtest lands in the output
	}{
		{"paths=source_relative", "rprtest"},
		{"paths=import", "example.com/rprtest"},
	}
	for _, tt := range tests {
		t.Run(tt.parameter, func(t *testing.T) {
			out := t.TempDir()
			req := request(t, tt.parameter, validFiles...)
			writeFiles(t, out, runProtocGenGo(t, protocGenGo, req))
			writeFiles(t, out, generatedFiles(t, runPlugin(t, req)))

			module := filepath.Join(out, filepath.FromSlash(tt.moduleDir))
			goMod := fmt.Sprintf("module example.com/rprtest\n\ngo 1.26\n\nrequire github.com/rprtunnel/rpr v0.0.0\n\nreplace github.com/rprtunnel/rpr => %s\n", root)
			goSum, err := os.ReadFile(filepath.Join(root, "go.sum"))
			if err != nil {
				t.Fatal(err)
			}
			writeFiles(t, module, map[string]string{"go.mod": goMod, "go.sum": string(goSum)})
			runChecks := tt.parameter == "paths=source_relative"
			if runChecks {
				checks, err := filepath.Glob(filepath.Join("testdata", "compilecheck", "*_test.go"))
				if err != nil || len(checks) == 0 {
					t.Fatalf("no testdata/compilecheck/*_test.go: %v", err)
				}
				for _, path := range checks {
					check, err := os.ReadFile(path)
					if err != nil {
						t.Fatal(err)
					}
					writeFiles(t, module, map[string]string{"compilecheck/" + filepath.Base(path): string(check)})
				}
			}

			goCommand(t, module, "build", "./...")
			goCommand(t, module, "vet", "./...")
			if runChecks {
				goCommand(t, module, "test", "-race", "-count=1", "./compilecheck")
			}
		})
	}
}

// runProtocGenGo runs the protoc-gen-go binary on req and returns its files.
func runProtocGenGo(t *testing.T, binary string, req *pluginpb.CodeGeneratorRequest) map[string]string {
	t.Helper()
	in, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(binary)
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("protoc-gen-go: %v\n%s", err, stderr.Bytes())
	}
	resp := new(pluginpb.CodeGeneratorResponse)
	if err := proto.Unmarshal(stdout.Bytes(), resp); err != nil {
		t.Fatal(err)
	}
	return generatedFiles(t, resp)
}

// goCommand runs the go command in dir, with a module cache and proxy as
// configured for the user, and fails the test with its output on error.
func goCommand(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, output)
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sortedKeys returns the keys of all maps, sorted, without duplicates.
func sortedKeys(maps ...map[string]string) []string {
	var keys []string
	for _, m := range maps {
		for k := range m {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// firstDifference describes the first line where got differs from want.
func firstDifference(want, got string) string {
	wantLines, gotLines := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(wantLines), len(gotLines)); i++ {
		var w, g string
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if w != g {
			return fmt.Sprintf("line %d:\n\twant %q\n\tgot  %q", i+1, w, g)
		}
	}
	return "no difference"
}
