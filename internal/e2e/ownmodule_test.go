package e2e

// TestOwnModule is the README's "Tutorial: rpr in your own module" run as a
// new user runs it: in a fresh module of their own (example.com/acme,
// in a temporary directory outside the repository), with a proto package
// of its own, against a real Redis. The commands, configuration files and
// programs are read out of README.md, from the fenced blocks after
// <!-- ownmodule:... --> markers, so the README cannot drift from what
// works:
//
//	<!-- ownmodule:init -->       sh, run by bash in the temporary directory
//	<!-- ownmodule:install -->    go commands, run one by one in the module
//	<!-- ownmodule:file PATH -->  written to PATH in the module
//	<!-- ownmodule:generate -->   sh, run by bash in the module
//	<!-- ownmodule:protoc -->     sh, run by bash when protoc is on PATH
//
// It runs offline (GOPROXY=off), as generation must: github.com/rprtunnel/rpr
// is replaced by this checkout, as `go get` of a published version would
// resolve it, and buf and protoc-gen-go come from the module cache at the
// versions tools/go.mod pins (a `go get` line of the README gets those
// versions in place of its own query, and the module requires the
// versions tools/go.mod selects for buf's dependencies, which are the ones
// the cache holds). Then it checks that only the user's files were
// generated, that a stale options.proto is refused, builds and vets the
// server and the client, checks that the schema the server publishes
// carries the .proto's comments (for rpr describe), makes calls through
// Redis and stops the server with SIGTERM, which must exit 0.
//
// It skips only when the module cache lacks buf or protoc-gen-go and they
// cannot be downloaded. What it costs is builds: buf in the new module
// (about 25 s on 2 cores the first time, when the build cache holds buf
// from tools/go.mod, as `make test` leaves it after buf lint: the module
// selects a newer genproto than tools/go.mod, so part of buf is compiled
// again) and the programs against this module's versions (about 15 s the
// first time); about 9 s in all once the build cache holds those.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

const (
	ownModulePath    = "example.com/acme"
	ownModuleService = "acme.orders.v1.Orders"
	// exportDir is where the README exports options.proto.
	exportDir = "third_party/rpr-proto"
)

// toolPins returns the modules, at the versions tools/go.mod selects, that
// buf and protoc-gen-go are built from: module path -> version.
func toolPins(ctx context.Context, t *testing.T, root string) map[string]string {
	t.Helper()
	list := func(offline bool) ([]byte, error) {
		cmd := exec.CommandContext(ctx, goTool(), "list", "-modfile=tools/go.mod", "-deps",
			"-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}",
			"github.com/bufbuild/buf/cmd/buf", "google.golang.org/protobuf/cmd/protoc-gen-go")
		cmd.Dir = root
		// Never -mod=mod here: this must not touch tools/go.mod or tools/go.sum.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "GOTOOLCHAIN=local")
		if offline {
			cmd.Env = append(cmd.Env, "GOPROXY=off")
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%v: %s", err, stderr.Bytes())
		}
		return out, nil
	}
	out, err := list(true)
	if err != nil {
		// Not in the module cache: fetch them if there is a network.
		var errOnline error
		if out, errOnline = list(false); errOnline != nil {
			t.Skipf("own-module test skipped: buf and protoc-gen-go of tools/go.mod are not in the module cache (%v) "+
				"and cannot be downloaded (%v); run `make test` or `go tool -modfile=tools/go.mod buf --version` once with a network", err, errOnline)
		}
		t.Logf("buf and protoc-gen-go were not in the module cache; downloaded them (%v)", err)
	}
	pins := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, version, ok := strings.Cut(line, " "); ok && version != "" {
			pins[path] = version
		}
	}
	for _, m := range []string{"github.com/bufbuild/buf", "google.golang.org/protobuf"} {
		if pins[m] == "" {
			t.Fatalf("go list of buf and protoc-gen-go in tools/go.mod names no version of %s:\n%s", m, out)
		}
	}
	return pins
}

// moduleOf returns the module of pins that provides pkg, or "".
func moduleOf(pins map[string]string, pkg string) string {
	best := ""
	for m := range pins {
		if (pkg == m || strings.HasPrefix(pkg, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	return best
}

// ownModule runs commands in the user's module.
type ownModule struct {
	t   *testing.T
	ctx context.Context
	dir string
	env []string
}

// run runs name args in the module and returns its combined output; it
// fails the test on error.
//
// A go command runs offline. The user's module resolves a graph of its
// own, and go.mod files that the tools' builds never read (those of
// modules a dependency requires without pruning, like go.lsp.dev/uri's
// github.com/google/go-cmp v0.4.0) may be missing from a fresh module
// cache: each one the command names is then downloaded with the module
// proxy of this process's environment, as a user's `go get` would fetch
// it, and the command runs again.
func (m *ownModule) run(name string, args ...string) string {
	m.t.Helper()
	out, err := m.try(name, args...)
	for range 20 {
		missing := missingModule(out)
		if err == nil || name != goTool() || missing == "" {
			break
		}
		m.t.Logf("%s %s: the module cache lacks %s; downloading it", name, strings.Join(args, " "), missing)
		offline := m.env
		m.env = onlineEnv(offline)
		fetched, ferr := m.try(goTool(), "mod", "download", missing)
		m.env = offline
		if ferr != nil {
			m.t.Fatalf("%s %s (in %s) needs %s, which the module cache lacks, and go mod download failed: %v\n%s\n%s",
				name, strings.Join(args, " "), m.dir, missing, ferr, out, fetched)
		}
		out, err = m.try(name, args...)
	}
	if err != nil {
		m.t.Fatalf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), m.dir, err, out)
	}
	return out
}

func (m *ownModule) try(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(m.ctx, 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = m.dir
	cmd.Env = m.env
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// bash runs a README shell block with bash -eu, as a user pasting it would
// (each command must succeed).
func (m *ownModule) bash(b readmeBlock) string {
	m.t.Helper()
	out, err := m.try("bash", "-euo", "pipefail", "-c", b.body)
	if err != nil {
		m.t.Fatalf("README.md:%d: the %q block failed in %s: %v\n%s\n%s", b.line, b.marker, m.dir, err, b.body, out)
	}
	return out
}

func TestOwnModule(t *testing.T) {
	for _, bin := range []string{"bash", "redis-server"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found on PATH: run `make test` (it installs Redis via scripts/ensure-redis.sh) or `apt-get install %s`", bin, bin)
		}
	}
	deadline := time.Now().Add(8 * time.Minute)
	if d, ok := t.Deadline(); ok && d.Add(-30*time.Second).Before(deadline) {
		deadline = d.Add(-30 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	t0 := time.Now()
	step := func(format string, args ...any) {
		t.Logf("%6.1fs  %s", time.Since(t0).Seconds(), fmt.Sprintf(format, args...))
	}

	root := repoRoot(t)
	blocks := readmeBlocks(t, filepath.Join(root, "README.md"))
	block := func(marker string) readmeBlock {
		t.Helper()
		b, ok := blocks[marker]
		if !ok {
			t.Fatalf("README.md has no <!-- ownmodule:%s --> block; this test runs the README's tutorial from its marked blocks", marker)
		}
		return b
	}
	var files []readmeBlock
	for marker, b := range blocks {
		switch path, isFile := strings.CutPrefix(marker, "file "); {
		case isFile && (path == "" || filepath.IsAbs(path) || strings.Contains(path, "..")):
			t.Fatalf("README.md:%d: marker %q names no file of the module", b.line, marker)
		case isFile:
			files = append(files, b)
		case !slices.Contains([]string{"init", "install", "generate", "protoc"}, marker):
			t.Fatalf("README.md:%d: unknown marker %q (this test knows init, install, file PATH, generate, protoc)", b.line, marker)
		}
	}
	pins := toolPins(ctx, t, root)

	// The module, as the README starts it.
	tmp := t.TempDir()
	env := append(os.Environ(),
		"GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local",
		// What a user has: go.mod and go.sum change only through go get and
		// go mod, so a missing `go get` in the README fails here too.
		"GOFLAGS=-mod=readonly",
	)
	top := &ownModule{t: t, ctx: ctx, dir: tmp, env: env}
	top.bash(block("init"))
	var acme string
	if err := filepath.WalkDir(tmp, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "go.mod" {
			acme = filepath.Dir(path)
			return fs.SkipAll
		}
		return err
	}); err != nil || acme == "" {
		t.Fatalf("the README's init block made no go.mod under %s (%v)", tmp, err)
	}
	m := &ownModule{t: t, ctx: ctx, dir: acme, env: env}
	if got := strings.TrimSpace(m.run(goTool(), "list", "-m")); got != ownModulePath {
		t.Fatalf("the README's init block made module %q, want %q", got, ownModulePath)
	}

	// What a published version would resolve to: this checkout. And the
	// versions of buf's dependencies that the module cache holds.
	m.run(goTool(), "mod", "edit", "-replace=github.com/rprtunnel/rpr="+root)
	requires := []string{"mod", "edit"}
	for path, version := range pins {
		requires = append(requires, "-require="+path+"@"+version)
	}
	m.run(goTool(), requires...)

	// Install, line by line.
	install := block("install")
	exported := false
	for _, line := range commandLines(install.body) {
		args := strings.Fields(line)
		if args[0] != "go" {
			t.Fatalf("README.md:%d: install line %q: this test runs only go commands there", install.line, line)
		}
		if len(args) > 2 && args[1] == "get" {
			pkg := args[len(args)-1]
			pkg, _, _ = strings.Cut(pkg, "@")
			if mod := moduleOf(pins, pkg); mod != "" {
				args[len(args)-1] = pkg + "@" + pins[mod] // offline: the version in the cache
			}
		}
		if slices.Contains(args, "--export-proto") {
			exported = true
		}
		m.run(goTool(), args[1:]...)
	}
	step("module set up: %s", strings.Join(commandLines(install.body), "; "))
	if !exported {
		t.Fatalf("README.md:%d: the install block does not export options.proto (protoc-gen-rpr --export-proto)", install.line)
	}
	if _, err := os.Stat(filepath.Join(acme, exportDir, "rpr", "v1", "options.proto")); err != nil {
		t.Fatalf("the install block did not write %s/rpr/v1/options.proto, where the tutorial's buf.yaml expects it: %v", exportDir, err)
	}
	for _, f := range files {
		path := filepath.Join(acme, filepath.FromSlash(strings.TrimPrefix(f.marker, "file ")))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(f.body), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Generate: only the user's files, importing rpr's options package.
	generate := block("generate")
	m.bash(generate)
	step("generated with buf (%s)", strings.Join(commandLines(generate.body), "; "))
	generated := goFiles(t, filepath.Join(acme, "gen"))
	wantGen := []string{"acme/orders/v1/orders.pb.go", "acme/orders/v1/orders_rpr.pb.go"}
	if !slices.Equal(slices.Sorted(maps.Keys(generated)), wantGen) {
		t.Fatalf("generated %q, want exactly %q (rpr's options.proto must not be generated into the module)", slices.Sorted(maps.Keys(generated)), wantGen)
	}
	if !strings.Contains(generated["acme/orders/v1/orders.pb.go"], `"github.com/rprtunnel/rpr/gen/rpr/v1"`) {
		t.Errorf("orders.pb.go does not import github.com/rprtunnel/rpr/gen/rpr/v1, the runtime's options package")
	}

	// A stale export (options.proto of another rpr version) is refused.
	optionsPath := filepath.Join(acme, exportDir, "rpr", "v1", "options.proto")
	exportedProto, err := os.ReadFile(optionsPath)
	if err != nil {
		t.Fatal(err)
	}
	stale := append(slices.Clone(exportedProto), "\nmessage FromAnotherVersion {}\n"...)
	if err := os.WriteFile(optionsPath, stale, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := m.try("bash", "-euo", "pipefail", "-c", generate.body)
	if err == nil || !strings.Contains(out, "--export-proto") {
		t.Errorf("generating against a changed %s: err=%v, want a failure that says to run --export-proto; output:\n%s", optionsPath, err, out)
	}
	if err := os.WriteFile(optionsPath, exportedProto, 0o644); err != nil {
		t.Fatal(err)
	}
	m.bash(generate)

	// protoc, when there is one, generates the same code.
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Log("protoc is not on PATH: the README's protoc route is not checked (apt-get install protobuf-compiler)")
	} else {
		m.bash(block("protoc"))
		byProtoc := goFiles(t, filepath.Join(acme, "gen"))
		for name, content := range generated {
			if withoutCompilerVersion(byProtoc[name]) != withoutCompilerVersion(content) {
				t.Errorf("protoc generated another %s than buf", name)
			}
		}
		step("generated with protoc: the same code")
	}

	// Build and vet the tutorial's programs.
	m.run(goTool(), "vet", "./...")
	bin := t.TempDir()
	server, client := filepath.Join(bin, "server"), filepath.Join(bin, "client")
	m.run(goTool(), "build", "-o", server, "./server")
	m.run(goTool(), "build", "-o", client, "./client")
	step("server and client built and vetted")

	// Run them against a real Redis.
	rs := redistest.Start(t)
	srv := exec.Command(server, "--redis", rs.URL())
	srv.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	srvOut := newSyncBuffer("")
	srv.Stdout, srv.Stderr = srvOut, srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = srv.Process.Kill()
			<-srvDone
		}
		if t.Failed() {
			t.Logf("server output:\n%s", srvOut.String())
		}
	})
	waitServing(ctx, t, rs.URL(), srvDone)
	step("server serving %s", ownModuleService)
	checkComments(ctx, t, rs.URL(), block("file proto/acme/orders/v1/orders.proto").body)

	call := func(want string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, client, append([]string{"--redis", rs.URL()}, args...)...)
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != want+"\n" {
			t.Errorf("client %s: %v, printed %q; want %q", strings.Join(args, " "), err, out, want)
		}
	}
	call("shipped")
	call("no such order", "--id", "7")
	step("client calls answered")

	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-srvDone:
		exited = true
		if err != nil {
			t.Fatalf("the server exited with %v after SIGTERM, want exit status 0 (Serve returns nil on a clean shutdown)", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the server did not exit within 15 s of SIGTERM")
	}
	step("server stopped by SIGTERM, exit status 0")
}

// waitServing waits until a live worker of the tutorial's service beats in
// Redis (clients refuse calls to a service with none).
func waitServing(ctx context.Context, t *testing.T, url string, exited <-chan error) {
	t.Helper()
	rdb, err := tunnel.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	svc := admin.New(rdb, admin.Options{}).Service(ownModuleService)
	deadline := time.After(30 * time.Second)
	for {
		if h, err := svc.Health(ctx); err == nil && h.Serving() {
			return
		}
		select {
		case err := <-exited:
			t.Fatalf("the server exited before serving: %v", err)
		case <-deadline:
			t.Fatalf("no live worker of %s after 30 s", ownModuleService)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// checkComments checks that the schema the server published carries the
// comment of the service in the tutorial's .proto file, for rpr describe.
func checkComments(ctx context.Context, t *testing.T, url, protoSource string) {
	t.Helper()
	rdb, err := tunnel.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	sd, err := admin.New(rdb, admin.Options{}).Service(ownModuleService).Schema(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := sd.ParentFile().SourceLocations().ByDescriptor(sd).LeadingComments
	if got == "" || !strings.Contains(protoSource, "//"+strings.TrimSuffix(got, "\n")+"\n") {
		t.Errorf("the published schema gives %s the comment %q, not the one in the README's .proto", ownModuleService, got)
	}
}

// goFiles returns the .go files under dir by slash path relative to dir.
func goFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		files[filepath.ToSlash(rel)] = string(data)
		return err
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return files
}

// withoutCompilerVersion drops the header line naming the compiler
// ("// - protoc v3.21.12", "// \tprotoc (unknown)"), the one line in which
// protoc's and buf's output differ.
func withoutCompilerVersion(src string) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(src))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(strings.TrimPrefix(line, "//")); strings.HasPrefix(line, "//") && len(f) >= 2 &&
			(f[0] == "protoc" || (f[0] == "-" && f[1] == "protoc")) {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}
