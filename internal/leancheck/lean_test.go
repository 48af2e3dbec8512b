package leancheck_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// runtimePackage is the package applications import.
const runtimePackage = "github.com/rprtunnel/rpr/tunnel"

// rprModule is the runtime's module.
const rprModule = "github.com/rprtunnel/rpr"

// allowedModules are the only modules the runtime may link, each with the
// reason it is there.
var allowedModules = map[string]string{
	rprModule:                                   "the runtime itself and its internal protocol packages",
	"github.com/redis/go-redis/v9":              "the Redis client",
	"github.com/cespare/xxhash/v2":              "go-redis (and the OTel API's attribute hashing)",
	"go.uber.org/atomic":                        "go-redis",
	"golang.org/x/sys":                          "go-redis (CPU feature detection)",
	"google.golang.org/protobuf":                "messages and descriptors",
	"google.golang.org/genproto/googleapis/rpc": "google.rpc.Status and errdetails in error details",
	"go.opentelemetry.io/otel":                  "the OpenTelemetry API: propagation, attributes, codes",
	"go.opentelemetry.io/otel/metric":           "the OpenTelemetry metrics API",
	"go.opentelemetry.io/otel/trace":            "the OpenTelemetry tracing API",
	"go.opentelemetry.io/otel/log":              "the OpenTelemetry API's global logger",
	"go.opentelemetry.io/auto/sdk":              "the OpenTelemetry tracing API's auto-instrumentation hook",
	"github.com/go-logr/logr":                   "the OpenTelemetry API's internal logging",
	"github.com/go-logr/stdr":                   "the OpenTelemetry API's internal logging",
	"github.com/vmihailenco/msgpack/v5":         "the envelope codec",
	"github.com/vmihailenco/tagparser/v2":       "msgpack",
	"github.com/sony/gobreaker/v2":              "the circuit breakers",
}

// servingPackages are standard packages whose job is to serve on a port
// (or expose a process's internals there): the runtime must not link them.
var servingPackages = []string{"net/http/pprof", "net/http/httptest", "net/rpc", "net/rpc/jsonrpc", "expvar", "net/http/cgi", "net/http/fcgi"}

// listeners are the functions that open a port or socket for others to
// connect to, by package; the runtime's own packages must not call them.
var listeners = map[string][]string{
	"net":      {"Listen", "ListenConfig", "ListenTCP", "ListenUDP", "ListenUnix", "ListenUnixgram", "ListenPacket", "ListenIP", "ListenMulticastUDP", "FileListener"},
	"net/http": {"ListenAndServe", "ListenAndServeTLS", "Serve", "ServeTLS", "Server"},
}

// graphForbidden are module path fragments that must not appear in the
// module graph of a module that requires only the runtime: the CLI's
// dependencies, the exporter's, and the test suites'.
var graphForbidden = []string{
	"github.com/spf13/cobra",
	"bubbletea",
	"lipgloss",
	"github.com/alicebob/miniredis",
	"github.com/schollz/progressbar",
	"prometheus",
	"go.opentelemetry.io/otel/sdk",
	"go.uber.org/goleak",
}

// goPackage is what `go list -json` says about a package.
type goPackage struct {
	ImportPath string
	Dir        string
	Standard   bool
	GoFiles    []string
	Imports    []string
	Module     *struct{ Path string }
}

// TestRuntimeLinksOnlyItsDependencies lists every package tunnel links and
// fails on a module outside allowedModules, on a serving package, and on
// one of rpr's own packages that imports net/http or opens a listener.
func TestRuntimeLinksOnlyItsDependencies(t *testing.T) {
	root := repoRoot(t)
	out := goCmd(t, root, nil, "list", "-deps", "-json=ImportPath,Dir,Standard,GoFiles,Imports,Module", runtimePackage)
	var pkgs []goPackage
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list -json: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	modules := map[string][]string{} // module -> its packages tunnel links
	nonStandard := 0
	for _, p := range pkgs {
		if slices.Contains(servingPackages, p.ImportPath) {
			t.Errorf("tunnel links %s, a package that serves on a port", p.ImportPath)
		}
		if p.Standard {
			continue
		}
		nonStandard++
		if p.Module == nil {
			t.Errorf("package %s is in no module", p.ImportPath)
			continue
		}
		modules[p.Module.Path] = append(modules[p.Module.Path], p.ImportPath)
		if p.Module.Path == rprModule {
			checkOwnPackage(t, p)
		}
	}
	t.Logf("go list -deps %s: %d packages, %d of them not in the standard library, from %d modules",
		runtimePackage, len(pkgs), nonStandard, len(modules))
	for _, m := range sortedKeys(modules) {
		why, ok := allowedModules[m]
		if !ok {
			t.Errorf("tunnel links module %s (packages %s); the runtime may link only: %s. "+
				"Move what needs it out of the runtime (to cmd/rpr or a test module), or, if the runtime truly needs it, add it to allowedModules with the reason",
				m, strings.Join(modules[m], ", "), strings.Join(sortedKeys(allowedModules), ", "))
			continue
		}
		t.Logf("  %-45s %3d packages  (%s)", m, len(modules[m]), why)
	}
}

// checkOwnPackage fails when one of rpr's packages that tunnel links
// imports net/http or calls a function that opens a listener.
func checkOwnPackage(t *testing.T, p goPackage) {
	t.Helper()
	if slices.Contains(p.Imports, "net/http") {
		t.Errorf("%s imports net/http: the runtime serves no HTTP", p.ImportPath)
	}
	fset := token.NewFileSet()
	for _, name := range p.GoFiles {
		file, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		local := map[string]string{} // local import name -> a package of listeners
		for _, spec := range file.Imports {
			path, _ := strconv.Unquote(spec.Path.Value)
			if _, ok := listeners[path]; !ok {
				continue
			}
			name := filepath.Base(path)
			if spec.Name != nil {
				name = spec.Name.Name
			}
			local[name] = path
		}
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && slices.Contains(listeners[local[x.Name]], sel.Sel.Name) {
				t.Errorf("%s: %s.%s: the runtime opens no port", fset.Position(sel.Pos()), local[x.Name], sel.Sel.Name)
			}
			return true
		})
	}
}

// TestUserModuleGraphIsLean builds a module outside the repository that
// requires the runtime (replaced by this checkout) and imports only
// tunnel, tidies it offline, and fails when its module graph names a
// module of graphForbidden, or when tidying raised its go directive above
// the runtime's.
func TestUserModuleGraphIsLean(t *testing.T) {
	root := repoRoot(t)
	var runtimeMod struct{ Go string }
	if err := json.Unmarshal(goCmd(t, root, nil, "mod", "edit", "-json"), &runtimeMod); err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}

	// Load every go.mod file of the runtime's module graph into the module
	// cache: a build of the runtime reads only the go.mod files it needs,
	// and tidying the module below reads the whole graph. Only this step
	// may use the module proxy (on a machine whose cache is fresh), for
	// exactly the versions the runtime's go.sum lists.
	goCmd(t, root, nil, "mod", "graph")

	dir := t.TempDir()
	goMod := "module example.com/leanuser\n\ngo " + runtimeMod.Go + "\n\n" +
		"require " + rprModule + " v0.0.0-00010101000000-000000000000\n\n" +
		"replace " + rprModule + " => " + root + "\n"
	mainGo := `// Command leanuser is a program that uses only rpr's runtime.
package main

import (
	"fmt"

	"github.com/rprtunnel/rpr/tunnel"
)

func main() { fmt.Println(tunnel.DefaultPrefix) }
`
	for name, text := range map[string]string{"go.mod": goMod, "main.go": mainGo} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Offline, so that tidy resolves nothing anew: every go.mod of the
	// graph is in the module cache now. -e keeps tidy going past packages
	// that only the dependencies' own tests import, whose modules the cache
	// may lack: they add no requirement to the graph.
	offline := []string{"GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off"}
	if out, err := goRun(dir, offline, "mod", "tidy", "-e"); err != nil {
		t.Fatalf("go mod tidy (offline) in a module that imports only tunnel: %v\n%s", err, out)
	}
	if out, err := goRun(dir, offline, "build", "-o", os.DevNull, "."); err != nil {
		t.Fatalf("go build of a module that imports only tunnel: %v\n%s", err, out)
	}
	var tidied struct{ Go string }
	if err := json.Unmarshal(goCmd(t, dir, offline, "mod", "edit", "-json"), &tidied); err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	if tidied.Go != runtimeMod.Go {
		t.Errorf("tidying a module that requires rpr raised its go directive from %s to %s: a dependency of the runtime needs go %s, so the runtime's go.mod should say so",
			runtimeMod.Go, tidied.Go, tidied.Go)
	}

	graph := string(goCmd(t, dir, offline, "mod", "graph"))
	nodes := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(graph), "\n") {
		for _, node := range strings.Fields(line) {
			nodes[node] = true
		}
	}
	for _, node := range sortedKeys(nodes) {
		for _, bad := range graphForbidden {
			if strings.Contains(node, bad) {
				t.Errorf("the module graph of a module that requires only rpr's runtime contains %s (matches %q): some requirement of rpr's go.mod brings it; move the code that needs it into a module of its own", node, bad)
			}
		}
	}
	t.Logf("go mod graph of a module that imports only tunnel (%d edges, %d modules), none of %s:\n%s",
		strings.Count(graph, "\n"), len(nodes), strings.Join(graphForbidden, ", "), graph)
}

// repoRoot returns the directory of the runtime's go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	gomod := strings.TrimSpace(string(goCmd(t, ".", nil, "env", "GOMOD")))
	if filepath.Base(gomod) != "go.mod" {
		t.Fatalf("go env GOMOD = %q: not in a module", gomod)
	}
	return filepath.Dir(gomod)
}

// goCmd runs the go command in dir with GOWORK=off and env added, and
// returns its standard output; it skips the test when go is not on PATH.
func goCmd(t *testing.T, dir string, env []string, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("the go command is not on PATH (%v): cannot inspect the module graph", err)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GOWORK=off"}, env...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return out
}

// goRun runs the go command like goCmd and returns its combined output.
func goRun(dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GOWORK=off"}, env...)...)
	return cmd.CombinedOutput()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
