package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

const greeterService = "examples.greeter.v1.Greeter"

// rprResult is what one in-process run of the command line printed.
type rprResult struct {
	stdout, stderr string
	code           int
}

// runRPRIO runs the command line in-process with stdin, keeping stdout and
// stderr apart, and prints the error as main would.
func runRPRIO(t *testing.T, stdin string, args ...string) rprResult {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	res := rprResult{code: 0}
	var exit exitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.code = exit.code
		if exit.cause != nil {
			errOut.WriteString(exit.cause.Error())
		}
	default:
		res.code = 1
		errOut.WriteString(err.Error())
	}
	res.stdout, res.stderr = out.String(), errOut.String()
	return res
}

// serve runs srv until the test ends and waits until service is live.
func serve(t *testing.T, rs *redistest.Server, srv *tunnel.Server, service string) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	rdb := rs.Client(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := tunnel.CheckHealth(context.Background(), rdb, "", service)
		if err == nil && h.Serving() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became live: %v", service, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startGreeter runs the example Greeter server against rs.
func startGreeter(t *testing.T, rs *redistest.Server, workerID string) {
	t.Helper()
	srv, err := tunnel.NewServer(rs.Client(t), tunnel.ServerOptions{WorkerID: workerID, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	greeterv1.RegisterGreeterServer(srv, greeter.Server{})
	serve(t, rs, srv, greeterService)
}

func TestCallGreeter(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "greeter-1")
	url := rs.URL()

	res := runRPRIO(t, "", "call", "--redis", url, greeterService+"/SayHello", `{"name":"Ada"}`)
	if res.code != 0 || !strings.Contains(res.stdout, `"message": "Hello, Ada!"`) {
		t.Fatalf("call: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if want := "{\n  \"message\": \"Hello, Ada!\"\n}\n"; res.stdout != want {
		t.Errorf("stdout = %q, want %q (indented, stable)", res.stdout, want)
	}

	// From stdin, from a file, with metadata, a timeout and pkg.Svc.Method.
	res = runRPRIO(t, `{"name": "Bo", "delayMs": 10}`, "call", "--redis", url, "-H", "tenant: acme", "--timeout", "3s", greeterService+"/SlowHello", "-")
	if res.code != 0 || !strings.Contains(res.stdout, `"message": "Hello, Bo, eventually!"`) {
		t.Errorf("call from stdin: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	file := filepath.Join(t.TempDir(), "req.json")
	if err := os.WriteFile(file, []byte(`{"name": "Cy"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	res = runRPRIO(t, "", "call", "--redis", url, greeterService+".SayHello", "@"+file)
	if res.code != 0 || !strings.Contains(res.stdout, `"message": "Hello, Cy!"`) {
		t.Errorf("call from @file: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}

	// The server refuses: code and message on stderr, exit 1.
	res = runRPRIO(t, "", "call", "--redis", url, greeterService+"/SayHello", `{"name":""}`)
	if res.code != 1 || res.stdout != "" || !strings.Contains(res.stderr, "INVALID_ARGUMENT (3)") || !strings.Contains(res.stderr, "name is empty") {
		t.Errorf("empty name: exit %d, stdout %q, stderr %q; want 1 and INVALID_ARGUMENT", res.code, res.stdout, res.stderr)
	}

	// The deadline passes in the handler.
	res = runRPRIO(t, "", "call", "--redis", url, "--timeout", "100ms", greeterService+"/SlowHello", `{"delay_ms": 5000}`)
	if res.code != 1 || !strings.Contains(res.stderr, "DEADLINE_EXCEEDED") {
		t.Errorf("timeout: exit %d, stderr %q; want 1 and DEADLINE_EXCEEDED", res.code, res.stderr)
	}

	// Bad input: exit 2, naming the problem and the expected type.
	for _, tc := range []struct{ input, want string }{
		{`{"nam": "x"}`, `unknown field "nam"`},
		{`{"name": 5}`, `invalid value for string field name`},
		{`{"name": `, `unexpected EOF`},
	} {
		res = runRPRIO(t, "", "call", "--redis", url, greeterService+"/SayHello", tc.input)
		if res.code != 2 || !strings.Contains(res.stderr, tc.want) || !strings.Contains(res.stderr, "examples.greeter.v1.SayHelloRequest") {
			t.Errorf("input %s: exit %d, stderr %q; want 2 naming %q and the message type", tc.input, res.code, res.stderr, tc.want)
		}
	}

	// Unknown names: exit 2 with what exists.
	res = runRPRIO(t, "", "call", "--redis", url, greeterService+"/SayBye", `{}`)
	if res.code != 2 || !strings.Contains(res.stderr, `no method "SayBye"`) || !strings.Contains(res.stderr, "SayHello, SlowHello") {
		t.Errorf("unknown method: exit %d, stderr %q", res.code, res.stderr)
	}
	res = runRPRIO(t, "", "call", "--redis", url, "examples.greeter.v1.Nobody/SayHello", `{}`)
	if res.code != 2 || !strings.Contains(res.stderr, "no published schema") || !strings.Contains(res.stderr, "start a server") {
		t.Errorf("unknown service: exit %d, stderr %q", res.code, res.stderr)
	}
	res = runRPRIO(t, "", "call", "--redis", url, "-H", "novalue", greeterService+"/SayHello", `{}`)
	if res.code != 2 || !strings.Contains(res.stderr, "key:value") {
		t.Errorf("bad header: exit %d, stderr %q", res.code, res.stderr)
	}
}

// TestCallUsesOnlyThePublishedSchema shows that the command line's path
// uses the schema from Redis: the target's descriptors are not the linked
// greeterv1 ones, and its messages are dynamicpb.
func TestCallUsesOnlyThePublishedSchema(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "greeter-1")
	target, err := loadTarget(context.Background(), rs.Client(t), tunnel.DefaultPrefix, greeterService+"/SayHello")
	if err != nil {
		t.Fatal(err)
	}
	linked := (&greeterv1.SayHelloRequest{}).ProtoReflect().Descriptor()
	if target.method.Input() == linked {
		t.Fatal("the target's input is the linked greeterv1 descriptor")
	}
	if _, err := target.files.FindFileByPath("examples/greeter/v1/greeter.proto"); err != nil {
		t.Fatal(err)
	}
	if target.files == protoregistry.GlobalFiles {
		t.Fatal("the target uses GlobalFiles")
	}
	req, err := readRequest(strings.NewReader(""), `{"name":"Ada"}`, target)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := req.(*dynamicpb.Message); !ok {
		t.Fatalf("request is a %T, want *dynamicpb.Message", req)
	}
}

// shoutFile is a service no Go code in this program was generated from:
// rpr call can call it only through the schema published to Redis. Its
// messages are wire-compatible with google.protobuf.StringValue, which the
// hand-written server below decodes.
func shoutFile(t *testing.T) (*descriptorpb.FileDescriptorProto, protoreflect.FileDescriptor) {
	t.Helper()
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("rprtest/shout/v1/shout.proto"),
		Package: proto.String("rprtest.shout.v1"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("ShoutRequest"), Field: []*descriptorpb.FieldDescriptorProto{{Name: proto.String("text"), JsonName: proto.String("text"), Number: proto.Int32(1), Type: str, Label: opt}}},
			{Name: proto.String("ShoutResponse"), Field: []*descriptorpb.FieldDescriptorProto{{Name: proto.String("loud_text"), JsonName: proto.String("loudText"), Number: proto.Int32(1), Type: str, Label: opt}}},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Shout"),
			Method: []*descriptorpb.MethodDescriptorProto{{
				Name: proto.String("Shout"), InputType: proto.String(".rprtest.shout.v1.ShoutRequest"), OutputType: proto.String(".rprtest.shout.v1.ShoutResponse"),
				Options: &descriptorpb.MethodOptions{IdempotencyLevel: descriptorpb.MethodOptions_NO_SIDE_EFFECTS.Enum()},
			}},
		}},
	}
	fd, err := protodesc.NewFile(fdp, new(protoregistry.Files))
	if err != nil {
		t.Fatal(err)
	}
	return fdp, fd
}

func TestCallServiceNotLinkedIntoRPR(t *testing.T) {
	const service = "rprtest.shout.v1.Shout"
	if _, err := protoregistry.GlobalFiles.FindDescriptorByName(service); err == nil {
		t.Fatalf("%s is linked into the test; the test proves nothing", service)
	}
	rs := redistest.Start(t)
	fdp, fd := shoutFile(t)
	set, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{fdp}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Client(t).Set(context.Background(), tunnel.DefaultPrefix+"{"+service+"}:schema", set, 0).Err(); err != nil {
		t.Fatal(err)
	}
	// An error detail of the schema's own response type, and one of a type
	// the schema does not have.
	inSchema := dynamicpb.NewMessage(fd.Messages().ByName("ShoutResponse"))
	inSchema.Set(fd.Messages().ByName("ShoutResponse").Fields().ByName("loud_text"), protoreflect.ValueOfString("TOO QUIET"))
	_, other := shoutFileWithPackage(t, "rprtest.secret.v1")
	unknown := dynamicpb.NewMessage(other.Messages().ByName("ShoutRequest"))

	desc := &tunnel.ServiceDesc{ServiceName: service, Methods: []tunnel.MethodDesc{{
		Service: service,
		Name:    "Shout",
		Handler: func(_ any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
			in := new(wrapperspb.StringValue)
			if err := decode(in); err != nil {
				return nil, err
			}
			if tunnel.HeaderFromContext(ctx).Get("volume") != "max" {
				e, err := tunnel.Errorf(tunnel.FailedPrecondition, "volume is not max").WithDetails(inSchema, unknown)
				if err != nil {
					return nil, err
				}
				return nil, e
			}
			return wrapperspb.String(strings.ToUpper(in.GetValue())), nil
		},
	}}}
	srv, err := tunnel.NewServer(rs.Client(t), tunnel.ServerOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv.RegisterService(desc, struct{}{})
	serve(t, rs, srv, service)

	res := runRPRIO(t, "", "call", "--redis", rs.URL(), "-H", "volume:max", service+"/Shout", `{"text": "hello"}`)
	if res.code != 0 || !strings.Contains(res.stdout, `"loudText": "HELLO"`) {
		t.Fatalf("call: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	res = runRPRIO(t, "", "call", "--redis", rs.URL(), service+"/Shout", `{"text": "hello"}`)
	for _, want := range []string{"FAILED_PRECONDITION (9)", "volume is not max", `rprtest.shout.v1.ShoutResponse {"loudText":"TOO QUIET"}`, "type.googleapis.com/rprtest.secret.v1.ShoutRequest (type not in the published schema"} {
		if res.code != 1 || !strings.Contains(res.stderr, want) {
			t.Errorf("failing call: exit %d, stderr %q; want 1 and %q", res.code, res.stderr, want)
		}
	}

	res = runRPRIO(t, "", "ls", "--redis", rs.URL())
	if res.code != 0 || !strings.Contains(res.stdout, "Shout") || !strings.Contains(res.stdout, "idempotent") {
		t.Errorf("ls: exit %d, stdout %q; want Shout flagged idempotent", res.code, res.stdout)
	}
}

// shoutFileWithPackage is shoutFile under another package.
func shoutFileWithPackage(t *testing.T, pkg string) (*descriptorpb.FileDescriptorProto, protoreflect.FileDescriptor) {
	t.Helper()
	fdp, _ := shoutFile(t)
	fdp.Package = proto.String(pkg)
	fdp.Name = proto.String(strings.ReplaceAll(pkg, ".", "/") + "/shout.proto")
	fdp.Service[0].Method[0].InputType = proto.String("." + pkg + ".ShoutRequest")
	fdp.Service[0].Method[0].OutputType = proto.String("." + pkg + ".ShoutResponse")
	fd, err := protodesc.NewFile(fdp, new(protoregistry.Files))
	if err != nil {
		t.Fatal(err)
	}
	return fdp, fd
}
