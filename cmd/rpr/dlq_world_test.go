package main

// The world the rpr dlq tests run in: a real server of a hand-built async
// service whose handlers fail until fixed, and the helpers that read what
// the commands print.

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// jobsSvc is the hand-built async service the dlq tests dead-letter into.
// Its requests are google.protobuf.StringValue on the wire, which the
// schema published below calls rprtest.jobs.v1.JobRequest {string job = 1}.
const jobsSvc = "rprtest.jobs.v1.Jobs"

// jobsWorld is a real redis-server with a real server of jobsSvc whose
// handlers fail until fixed, and a client to enqueue with.
type jobsWorld struct {
	t      *testing.T
	rs     *redistest.Server
	rdb    *redis.Client
	client *tunnel.Client
	fixed  atomic.Bool // the deployed fix: handlers succeed once set

	mu   sync.Mutex
	done map[string]int // successful runs per job
}

// jobsMethods: Charge fails with UNAVAILABLE (retried, then dead-lettered
// after its 2 attempts), Notify with INVALID_ARGUMENT (dead-lettered at
// once: not retryable).
// jobsInfo is the Jobs service of jobsWorld.
var jobsInfo = tunnel.ServiceInfo{Name: jobsSvc}

func (w *jobsWorld) method(name string) *tunnel.MethodDesc {
	return &tunnel.MethodDesc{
		Service: &jobsInfo,
		Name:    name,
		Async:   true,
		Retry:   &tunnel.RetryPolicy{MaxAttempts: 2, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond},
		Handler: func(_ any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
			in := new(wrapperspb.StringValue)
			if err := decode(in); err != nil {
				return nil, err
			}
			if !w.fixed.Load() {
				if name == "Notify" {
					return nil, tunnel.Errorf(tunnel.InvalidArgument, "no address for %s", in.GetValue())
				}
				return nil, tunnel.Errorf(tunnel.Unavailable, "payments backend is down")
			}
			w.mu.Lock()
			w.done[in.GetValue()]++
			w.mu.Unlock()
			return nil, nil
		},
	}
}

func newJobsWorld(t *testing.T) *jobsWorld {
	t.Helper()
	return newJobsWorldCapped(t, 0)
}

// newJobsWorldCapped is newJobsWorld with a server that keeps each
// dead-letter stream under maxDeadLetters (0: the default).
func newJobsWorldCapped(t *testing.T, maxDeadLetters int) *jobsWorld {
	t.Helper()
	rs := redistest.Start(t)
	w := &jobsWorld{t: t, rs: rs, rdb: rs.Client(t), done: map[string]int{}}
	w.publishSchema()

	quiet := slog.New(slog.DiscardHandler)
	srv, err := tunnel.NewServer(rs.Client(t), tunnel.ServerOptions{WorkerID: "dlq-w1", Logger: quiet, RetryPollInterval: 10 * time.Millisecond, MaxDeadLetters: maxDeadLetters})
	if err != nil {
		t.Fatal(err)
	}
	srv.RegisterService(&tunnel.ServiceDesc{Service: &jobsInfo, Methods: []tunnel.MethodDesc{*w.method("Charge"), *w.method("Notify")}}, struct{}{})
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	w.waitFor("the server to be live", func() bool {
		h, err := serviceOf(w.rdb, jobsSvc).Health(context.Background())
		return err == nil && h.Serving()
	})

	w.client, err = tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{BizCode: "JOBS", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.client.Close() })
	return w
}

// publishSchema writes the service's schema as its servers would, had
// they been generated from a .proto (hand-built ServiceDescs publish none).
func (w *jobsWorld) publishSchema() {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	method := func(name string) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: proto.String(".rprtest.jobs.v1.JobRequest"), OutputType: proto.String(".rprtest.jobs.v1.JobAck")}
	}
	set, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{{
		Name:    proto.String("rprtest/jobs/v1/jobs.proto"),
		Package: proto.String("rprtest.jobs.v1"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("JobRequest"), Field: []*descriptorpb.FieldDescriptorProto{{Name: proto.String("job"), JsonName: proto.String("job"), Number: proto.Int32(1), Type: str, Label: opt}}},
			{Name: proto.String("JobAck")},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Jobs"), Method: []*descriptorpb.MethodDescriptorProto{method("Charge"), method("Notify")}}},
	}}})
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.rdb.Set(context.Background(), tunnel.DefaultPrefix+"{"+jobsSvc+"}:schema", set, 0).Err(); err != nil {
		w.t.Fatal(err)
	}
}

// enqueue sends one job to method and returns its request id.
func (w *jobsWorld) enqueue(method, job string) string {
	w.t.Helper()
	r, err := w.client.Enqueue(context.Background(), w.method(method), wrapperspb.String(job), tunnel.WithHeader("tenant", "acme"))
	if err != nil {
		w.t.Fatal(err)
	}
	return r.RequestID
}

// enqueueGarbage puts an entry that is no envelope in the request stream;
// the server dead-letters it as undecodable, as it would a corrupt write.
func (w *jobsWorld) enqueueGarbage() {
	w.t.Helper()
	err := w.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: tunnel.DefaultPrefix + "{" + jobsSvc + "}:req", Values: []string{"e", "this is not an envelope"}}).Err()
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *jobsWorld) dlqLen() int64 {
	w.t.Helper()
	n, err := serviceOf(w.rdb, jobsSvc).DeadLetters().Len(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

func (w *jobsWorld) succeeded() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.done)
}

func (w *jobsWorld) waitFor(what string, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dlq runs `rpr dlq VERB --redis URL ARGS...` in-process with stdin.
func (w *jobsWorld) dlq(stdin, verb string, args ...string) rprRun {
	w.t.Helper()
	return runCLI(w.t, stdin, append([]string{"dlq", verb, "--redis", w.rs.URL()}, args...)...)
}

// lsRows returns the ENTRY column of an ls table, and each row's fields.
func lsRows(t *testing.T, out string) map[string][]string {
	t.Helper()
	rows := map[string][]string{}
	lines := strings.Split(out, "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "ENTRY ") {
		t.Fatalf("no table header in:\n%s", out)
	}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) > 0 && regexp.MustCompile(`^\d+-\d+$`).MatchString(f[0]) {
			rows[f[0]] = f
		}
	}
	return rows
}

// dlqTable returns the header and rows (by ENTRY) of an ls table whose
// entries may be of any shard ("1764434400123-0", "2/1764434400123-0").
func dlqTable(t *testing.T, out string) ([]string, map[string][]string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "ENTRY ") {
		t.Fatalf("no table header in:\n%s", out)
	}
	rows := map[string][]string{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) > 0 && regexp.MustCompile(`^(\d+/)?\d+-\d+$`).MatchString(f[0]) {
			rows[f[0]] = f
		}
	}
	return strings.Fields(lines[0]), rows
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
