package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestKeysAndSignedCall follows docs/security.md: rpr keys new makes the
// lines of a trust file, a server trusts them, and rpr call signs with
// one caller's secret; another caller, an unsigned call and a method the
// caller's line does not list are refused.
func TestKeysAndSignedCall(t *testing.T) {
	dir := t.TempDir()
	newKey := func(caller string) (line, secretFile string) {
		res := runCLI(t, "", "keys", "new", caller)
		fields := strings.Fields(res.stdout)
		if res.code != 0 || len(fields) != 2 || fields[0] != caller {
			t.Fatalf("rpr keys new %s: %s", caller, res)
		}
		secretFile = filepath.Join(dir, caller+".secret")
		if err := os.WriteFile(secretFile, []byte(fields[1]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(res.stdout), secretFile
	}
	ops, opsSecret := newKey("ops")
	web, webSecret := newKey("web")
	_, strangerSecret := newKey("stranger")
	trustFile := filepath.Join(dir, "trust.txt")
	trustText := "# who may call the greeter\n" + ops + "\n" + web + " " + greeterService + "/SayHello\n"
	if err := os.WriteFile(trustFile, []byte(trustText), 0o600); err != nil {
		t.Fatal(err)
	}
	trust, err := readTrustFile(trustFile)
	if err != nil {
		t.Fatal(err)
	}

	rs := redistest.Start(t)
	srv, err := tunnel.NewServer(rs.Client(t), tunnel.ServerOptions{Trust: trust, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	greeterv1.RegisterGreeterServer(srv, greeter.Server{})
	serve(t, rs, srv, greeterService)
	url := rs.URL()

	call := func(method string, flags ...string) rprRun {
		args := append([]string{"call", "--redis", url}, flags...)
		return runCLI(t, "", append(args, greeterService+"/"+method, `{"name":"Ada"}`)...)
	}
	if res := call("SayHello", "--caller", "web", "--caller-secret-file", webSecret); res.code != 0 || !strings.Contains(res.stdout, "Hello, Ada!") {
		t.Errorf("web, signed: %s", res)
	}
	if res := call("SayHello", "--caller", "ops", "--caller-secret-file", opsSecret, "--seal"); res.code != 0 || !strings.Contains(res.stdout, "Hello, Ada!") {
		t.Errorf("ops, sealed: %s", res)
	}
	for name, c := range map[string]struct {
		method string
		flags  []string
		want   string
	}{
		"unsigned":        {"SayHello", nil, "UNAUTHENTICATED"},
		"stranger":        {"SayHello", []string{"--caller", "stranger", "--caller-secret-file", strangerSecret}, `caller "stranger" is not one this server trusts`},
		"wrong secret":    {"SayHello", []string{"--caller", "web", "--caller-secret-file", opsSecret}, "does not verify"},
		"not on its line": {"SlowHello", []string{"--caller", "web", "--caller-secret-file", webSecret}, "PERMISSION_DENIED"},
	} {
		if res := call(c.method, c.flags...); res.code != 1 || !strings.Contains(res.stderr, c.want) {
			t.Errorf("%s: want exit 1 mentioning %q; got %s", name, c.want, res)
		}
	}
	if res := call("SayHello", "--caller", "web"); res.code != 2 || !strings.Contains(res.stderr, "--caller-secret-file") {
		t.Errorf("--caller alone: %s", res)
	}
}

func TestTrustFileErrorsNameTheLine(t *testing.T) {
	dir := t.TempDir()
	secret := tunnel.EncodeCallerSecret(tunnel.NewCallerSecret())
	for name, c := range map[string]struct{ text, want string }{
		"one field":  {"web\n", "trust.txt:1: want CALLER SECRET"},
		"bad secret": {"# c\nweb c2hvcnQ\n", "trust.txt:2: rpr: caller secret is 5 bytes"},
		"twice":      {"web " + secret + "\nweb " + secret + "\n", `trust.txt:2: caller "web" is listed twice`},
		"empty":      {"# nobody\n", "lists no callers"},
	} {
		path := filepath.Join(dir, "trust.txt")
		if err := os.WriteFile(path, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readTrustFile(path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, c.want)
		}
	}
}
