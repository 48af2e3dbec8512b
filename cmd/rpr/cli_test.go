package main

// The in-process runs of the command line the tests make.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/admin"
)

// execute runs the command line in-process with stdin, as main does: the
// error it ends with is printed on stderr by reportError, which also gives
// the exit status.
func execute(stdin string, stdout, stderr io.Writer, args ...string) int {
	root := newRootCommand()
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	return reportError(stderr, root.ExecuteContext(context.Background()))
}

// rprRun is what one in-process run of the command line printed.
type rprRun struct {
	stdout, stderr string
	code           int
}

func (r rprRun) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// runCLI runs the command line in-process with stdin, keeping stdout and
// stderr apart.
func runCLI(t *testing.T, stdin string, args ...string) rprRun {
	t.Helper()
	var out, errOut bytes.Buffer
	code := execute(stdin, &out, &errOut, args...)
	return rprRun{stdout: out.String(), stderr: errOut.String(), code: code}
}

// runRPR runs the command line in-process with an empty stdin and returns
// what it printed, stdout and stderr together, and its exit status.
func runRPR(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	code := execute("", &out, &out, args...)
	return out.String(), code
}

// serviceOf is the admin handle of service in rdb, under the default
// prefix, for what a test checks or sets up besides the command line.
func serviceOf(rdb redis.UniversalClient, service string) *admin.Service {
	return admin.New(rdb, admin.Options{}).Service(service)
}
