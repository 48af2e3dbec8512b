package main

import (
	"context"
	"encoding/json"
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
	_ "google.golang.org/protobuf/types/known/emptypb" // in the schema of mailerService
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	rprv1 "github.com/rprtunnel/rpr/gen/rpr/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

const greeterService = "examples.greeter.v1.Greeter"

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
		h, err := serviceOf(rdb, service).Health(context.Background())
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

	res := runCLI(t, "", "call", "--redis", url, greeterService+"/SayHello", `{"name":"Ada"}`)
	if res.code != 0 || !strings.Contains(res.stdout, `"message": "Hello, Ada!"`) {
		t.Fatalf("call: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if want := "{\n  \"message\": \"Hello, Ada!\"\n}\n"; res.stdout != want {
		t.Errorf("stdout = %q, want %q (indented, stable)", res.stdout, want)
	}

	// From stdin, from a file, with metadata, a timeout and pkg.Svc.Method.
	res = runCLI(t, `{"name": "Bo", "delayMs": 10}`, "call", "--redis", url, "-H", "tenant: acme", "--timeout", "3s", greeterService+"/SlowHello", "-")
	if res.code != 0 || !strings.Contains(res.stdout, `"message": "Hello, Bo, eventually!"`) {
		t.Errorf("call from stdin: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	file := filepath.Join(t.TempDir(), "req.json")
	if err := os.WriteFile(file, []byte(`{"name": "Cy"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	res = runCLI(t, "", "call", "--redis", url, greeterService+".SayHello", "@"+file)
	if res.code != 0 || !strings.Contains(res.stdout, `"message": "Hello, Cy!"`) {
		t.Errorf("call from @file: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}

	// The server refuses: code and message on stderr, exit 1.
	res = runCLI(t, "", "call", "--redis", url, greeterService+"/SayHello", `{"name":""}`)
	if res.code != 1 || res.stdout != "" || !strings.Contains(res.stderr, "INVALID_ARGUMENT (3)") || !strings.Contains(res.stderr, "name is empty") {
		t.Errorf("empty name: exit %d, stdout %q, stderr %q; want 1 and INVALID_ARGUMENT", res.code, res.stdout, res.stderr)
	}

	// The deadline passes in the handler.
	res = runCLI(t, "", "call", "--redis", url, "--timeout", "100ms", greeterService+"/SlowHello", `{"delay_ms": 5000}`)
	if res.code != 1 || !strings.Contains(res.stderr, "DEADLINE_EXCEEDED") {
		t.Errorf("timeout: exit %d, stderr %q; want 1 and DEADLINE_EXCEEDED", res.code, res.stderr)
	}

	// Bad input: exit 2, naming the problem and the expected type.
	for _, tc := range []struct{ input, want string }{
		{`{"nam": "x"}`, `unknown field "nam"`},
		{`{"name": 5}`, `invalid value for string field name`},
		{`{"name": `, `unexpected EOF`},
	} {
		res = runCLI(t, "", "call", "--redis", url, greeterService+"/SayHello", tc.input)
		if res.code != 2 || !strings.Contains(res.stderr, tc.want) || !strings.Contains(res.stderr, "examples.greeter.v1.SayHelloRequest") {
			t.Errorf("input %s: exit %d, stderr %q; want 2 naming %q and the message type", tc.input, res.code, res.stderr, tc.want)
		}
	}

	// Names Redis does not know: exit 1 (the look-up failed) with what exists.
	res = runCLI(t, "", "call", "--redis", url, greeterService+"/SayBye", `{}`)
	if res.code != 1 || !strings.Contains(res.stderr, `no method "SayBye"`) || !strings.Contains(res.stderr, "SayHello, SlowHello") {
		t.Errorf("unknown method: exit %d, stderr %q", res.code, res.stderr)
	}
	res = runCLI(t, "", "call", "--redis", url, "examples.greeter.v1.Nobody/SayHello", `{}`)
	if res.code != 1 || !strings.Contains(res.stderr, "unknown service examples.greeter.v1.Nobody; known: "+greeterService+" (rpr ls lists them)") {
		t.Errorf("unknown service: exit %d, stderr %q", res.code, res.stderr)
	}
	res = runCLI(t, "", "call", "--redis", url, "-H", "novalue", greeterService+"/SayHello", `{}`)
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
	target, err := loadTarget(context.Background(), admin.New(rs.Client(t), admin.Options{}), rs.URL(), greeterService+"/SayHello")
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

	info := &tunnel.ServiceInfo{Name: service}
	desc := &tunnel.ServiceDesc{Service: info, Methods: []tunnel.MethodDesc{{
		Service: info,
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

	res := runCLI(t, "", "call", "--redis", rs.URL(), "-H", "volume:max", service+"/Shout", `{"text": "hello"}`)
	if res.code != 0 || !strings.Contains(res.stdout, `"loudText": "HELLO"`) {
		t.Fatalf("call: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	res = runCLI(t, "", "call", "--redis", rs.URL(), service+"/Shout", `{"text": "hello"}`)
	for _, want := range []string{"FAILED_PRECONDITION (9)", "volume is not max", `rprtest.shout.v1.ShoutResponse {"loudText":"TOO QUIET"}`, "type.googleapis.com/rprtest.secret.v1.ShoutRequest (type not in the published schema"} {
		if res.code != 1 || !strings.Contains(res.stderr, want) {
			t.Errorf("failing call: exit %d, stderr %q; want 1 and %q", res.code, res.stderr, want)
		}
	}

	res = runCLI(t, "", "ls", "--redis", rs.URL())
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

// mailerService is an async service published to Redis by the test alone:
// enqueueing needs no server, so rpr call can be tested on async methods
// before any example implements one.
const mailerService = "rprtest.mail.v1.Mailer"

// publishMailerSchema writes the schema of mailerService to Redis as a
// server would: Send is async, Count is unary, and the service caps its
// backlog at maxBacklog.
func publishMailerSchema(t *testing.T, rs *redistest.Server, maxBacklog uint64) {
	t.Helper()
	svcOpts := &descriptorpb.ServiceOptions{}
	proto.SetExtension(svcOpts, rprv1.E_Service, &rprv1.ServiceOptions{MaxBacklog: maxBacklog})
	sendOpts := &descriptorpb.MethodOptions{}
	proto.SetExtension(sendOpts, rprv1.E_Method, &rprv1.MethodOptions{Async: true})
	fdp := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("rprtest/mail/v1/mail.proto"),
		Package:    proto.String("rprtest.mail.v1"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"google/protobuf/empty.proto", "google/protobuf/wrappers.proto", "rpr/v1/options.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name:    proto.String("Mailer"),
			Options: svcOpts,
			Method: []*descriptorpb.MethodDescriptorProto{
				{Name: proto.String("Send"), InputType: proto.String(".google.protobuf.StringValue"), OutputType: proto.String(".google.protobuf.Empty"), Options: sendOpts},
				{Name: proto.String("Count"), InputType: proto.String(".google.protobuf.Empty"), OutputType: proto.String(".google.protobuf.StringValue")},
			},
		}},
	}
	// The schema holds the file and everything it imports, transitively.
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(path string)
	add = func(path string) {
		if seen[path] {
			return
		}
		seen[path] = true
		fd, err := protoregistry.GlobalFiles.FindFileByPath(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := range fd.Imports().Len() {
			add(fd.Imports().Get(i).Path())
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	for _, dep := range fdp.Dependency {
		add(dep)
	}
	set.File = append(set.File, fdp)
	raw, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Client(t).Set(context.Background(), tunnel.DefaultPrefix+"{"+mailerService+"}:schema", raw, 0).Err(); err != nil {
		t.Fatal(err)
	}
}

// callReceipt is what rpr call prints for an async method.
type callReceipt struct {
	RequestID      string    `json:"request_id"`
	IdempotencyKey string    `json:"idempotency_key"`
	ProcessAt      time.Time `json:"process_at"`
}

func TestCallAsyncEnqueues(t *testing.T) {
	rs := redistest.Start(t)
	publishMailerSchema(t, rs, 0)
	rdb := rs.Client(t)
	ctx := context.Background()
	url := rs.URL()
	queue := tunnel.DefaultPrefix + "{" + mailerService + "}:req"
	scheduled := tunnel.DefaultPrefix + "{" + mailerService + "}:retry"

	res := runCLI(t, "", "call", "--redis", url, "-v", mailerService+"/Send", `"hello"`)
	if res.code != 0 {
		t.Fatalf("call: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	var r callReceipt
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
		t.Fatalf("stdout %q is not a receipt: %v", res.stdout, err)
	}
	if r.RequestID == "" || r.IdempotencyKey != r.RequestID || time.Since(r.ProcessAt).Abs() > time.Minute {
		t.Errorf("receipt %+v; want a request id, the same idempotency key, due now", r)
	}
	if !strings.Contains(res.stderr, "request id: "+r.RequestID) {
		t.Errorf("-v: stderr %q lacks the request id", res.stderr)
	}
	if n, err := rdb.XLen(ctx, queue).Result(); err != nil || n != 1 {
		t.Errorf("XLEN %s = %d, %v; want the request queued", queue, n, err)
	}

	// Scheduled, with an idempotency key.
	res = runCLI(t, "", "call", "--redis", url, "--idempotency-key", "mail-42", "--delay", "1h", mailerService+"/Send", `"later"`)
	if res.code != 0 {
		t.Fatalf("delayed call: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	r = callReceipt{}
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
		t.Fatalf("stdout %q is not a receipt: %v", res.stdout, err)
	}
	if r.IdempotencyKey != "mail-42" || r.RequestID == "" || r.RequestID == r.IdempotencyKey ||
		time.Until(r.ProcessAt) < 59*time.Minute || time.Until(r.ProcessAt) > 61*time.Minute {
		t.Errorf("receipt %+v; want key mail-42, due in an hour", r)
	}
	if n, err := rdb.ZCard(ctx, scheduled).Result(); err != nil || n != 1 {
		t.Errorf("ZCARD %s = %d, %v; want the delayed request scheduled", scheduled, n, err)
	}

	// Flags that do not apply.
	for _, args := range [][]string{
		{"--delay", "1s", mailerService + "/Count"},
		{"--idempotency-key", "k", mailerService + "/Count"},
	} {
		res = runCLI(t, "", append([]string{"call", "--redis", url}, args...)...)
		if res.code != 2 || !strings.Contains(res.stderr, "apply to async methods only; "+mailerService+"/Count is a unary method") {
			t.Errorf("call %q: exit %d, stderr %q; want 2 and an error about async-only flags", args, res.code, res.stderr)
		}
	}
	res = runCLI(t, "", "call", "--redis", url, "--delay", "-1s", mailerService+"/Send", `"x"`)
	if res.code != 2 || !strings.Contains(res.stderr, "--delay -1s is negative") {
		t.Errorf("negative delay: exit %d, stderr %q", res.code, res.stderr)
	}
}

// TestCallAsyncBacklogFull checks that the service's max_backlog reaches
// the client through the published schema: with a cap of 2 and no server
// draining the queue, enqueueing is refused within a few calls.
func TestCallAsyncBacklogFull(t *testing.T) {
	rs := redistest.Start(t)
	publishMailerSchema(t, rs, 2)
	var res rprRun
	for i := range 4 {
		res = runCLI(t, "", "call", "--redis", rs.URL(), mailerService+"/Send", `"hello"`)
		if res.code != 0 {
			if i == 0 {
				t.Fatalf("first call refused: exit %d, stderr %q", res.code, res.stderr)
			}
			break
		}
	}
	for _, want := range []string{mailerService + "/Send failed", "RESOURCE_EXHAUSTED", "executed:   no"} {
		if res.code != 1 || !strings.Contains(res.stderr, want) {
			t.Errorf("call over the backlog cap: exit %d, stderr %q; want 1 and %q", res.code, res.stderr, want)
		}
	}
}

// TestCallDefaultTimeoutIsTheLibrarys: without --timeout or a method's
// own, rpr call waits as long as a program's call does.
func TestCallDefaultTimeoutIsTheLibrarys(t *testing.T) {
	if callDefaultTimeout != tunnel.DefaultCallTimeout {
		t.Errorf("rpr call's default timeout %v; the library's is %v", callDefaultTimeout, tunnel.DefaultCallTimeout)
	}
	res := runCLI(t, "", "call", "--help")
	if want := "else " + tunnel.DefaultCallTimeout.String() + " (tunnel.DefaultCallTimeout"; !strings.Contains(res.stdout, want) {
		t.Errorf("rpr call --help does not say %q:\n%s", want, res.stdout)
	}
}
