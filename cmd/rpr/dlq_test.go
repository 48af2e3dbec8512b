package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
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
	rs := redistest.Start(t)
	w := &jobsWorld{t: t, rs: rs, rdb: rs.Client(t), done: map[string]int{}}
	w.publishSchema()

	quiet := slog.New(slog.DiscardHandler)
	srv, err := tunnel.NewServer(rs.Client(t), tunnel.ServerOptions{WorkerID: "dlq-w1", Logger: quiet, RetryPollInterval: 10 * time.Millisecond})
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
		h, err := tunnel.CheckHealth(context.Background(), w.rdb, "", jobsSvc)
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
	n, err := tunnel.NewDeadLetterQueue(w.rdb, "", jobsSvc).Len(context.Background())
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
	return runDlqCLI(w.t, stdin, append([]string{"dlq", verb, "--redis", w.rs.URL()}, args...)...)
}

// rprRun is what one in-process run of the command line printed.
type rprRun struct {
	stdout, stderr string
	code           int
}

func (r rprRun) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// runDlqCLI runs the command line in-process with stdin, keeping stdout
// and stderr apart and printing the error as main does.
func runDlqCLI(t *testing.T, stdin string, args ...string) rprRun {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	res := rprRun{}
	var exit exitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.code = exit.code
		if exit.cause != nil {
			errOut.WriteString(exit.cause.Error() + "\n")
		}
	default:
		res.code = 1
		errOut.WriteString(err.Error() + "\n")
	}
	res.stdout, res.stderr = out.String(), errOut.String()
	return res
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

func TestDlqPoisonMessageStory(t *testing.T) {
	w := newJobsWorld(t)
	var charges []string
	for i := range 3 {
		charges = append(charges, w.enqueue("Charge", fmt.Sprintf("order-%d", i+1)))
	}
	notify := w.enqueue("Notify", "customer-7")
	w.enqueue("Notify", "customer-8")
	w.enqueueGarbage()
	w.waitFor("6 dead letters", func() bool { return w.dlqLen() == 6 })

	// ls: everything, oldest first, with the footer.
	res := w.dlq("", "ls", jobsSvc)
	if res.code != 0 || !strings.Contains(res.stdout, "6 dead letters of "+jobsSvc+"\n") {
		t.Fatalf("ls:\n%s", res)
	}
	t.Logf("rpr dlq ls %s:\n%s", jobsSvc, res.stdout)
	if header := strings.Fields(strings.SplitN(res.stdout, "\n", 2)[0]); strings.Join(header, " ") != strings.Join(dlqColumns, " ") {
		t.Errorf("header %q, want %q", header, dlqColumns)
	}
	rows := lsRows(t, res.stdout)
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6:\n%s", len(rows), res.stdout)
	}
	byRequest := map[string][]string{}
	var garbageEntry string
	for entry, f := range rows {
		byRequest[f[1]] = f
		if f[1] == "-" {
			garbageEntry = entry
		}
	}
	// ENTRY REQUEST METHOD CODE ATTEMPTS AGE REASON...
	if f := byRequest[charges[0]]; len(f) < 7 || f[2] != "Charge" || f[3] != "UNAVAILABLE" || f[4] != "2" ||
		strings.Join(f[6:], " ") != "attempts exhausted (2 of 2): payments backend is down" {
		t.Errorf("Charge row %q", f)
	}
	if f := byRequest[notify]; len(f) < 7 || f[2] != "Notify" || f[3] != "INVALID_ARGUMENT" || f[4] != "1" ||
		!strings.Contains(strings.Join(f[6:], " "), "not retryable: no address for customer-7") {
		t.Errorf("Notify row %q", f)
	}
	if f := rows[garbageEntry]; garbageEntry == "" || f[2] != "-" || f[4] != "-" || !strings.Contains(strings.Join(f[6:], " "), "envelope") {
		t.Errorf("garbage row %q (entry %q)", f, garbageEntry)
	}

	// Filters, the limit and their footers.
	for _, tc := range []struct {
		args   []string
		rows   int
		footer string
	}{
		{[]string{"--method", "Notify"}, 2, "2 of 6 dead letters of " + jobsSvc + " match"},
		{[]string{"--method", jobsSvc + "/Charge"}, 3, "3 of 6 dead letters of " + jobsSvc + " match"},
		{[]string{"--code", "unavailable"}, 3, "3 of 6"},
		{[]string{"--code", "invalid-argument"}, 3, "3 of 6"}, // Notify twice, and the garbage
		{[]string{"--code", "14", "--method", "Charge", "--limit", "1"}, 1, "showing 1 of 6 dead letters of " + jobsSvc + " (3 match; oldest first; --limit 0 shows all)"},
		{[]string{"--limit", "2"}, 2, "showing 2 of 6 dead letters of " + jobsSvc + " (oldest first; --limit 0 shows all)"},
		{[]string{"--newer-than", "1h"}, 6, "6 of 6"},
		{[]string{"--older-than", "10m", "--newer-than", "1d"}, 0, "none of the 6 dead letters of " + jobsSvc + " match --older-than 10m0s --newer-than 24h0m0s"},
	} {
		res := w.dlq("", "ls", append([]string{jobsSvc}, tc.args...)...)
		if res.code != 0 || !strings.Contains(res.stdout, tc.footer) {
			t.Errorf("ls %v: want %q in:\n%s", tc.args, tc.footer, res)
			continue
		}
		if tc.rows > 0 {
			if got := len(lsRows(t, res.stdout)); got != tc.rows {
				t.Errorf("ls %v: %d rows, want %d:\n%s", tc.args, got, tc.rows, res.stdout)
			}
		}
	}

	// The reason is cut to the width.
	t.Setenv("COLUMNS", "130")
	res = w.dlq("", "ls", jobsSvc, "--method", "Charge")
	for _, line := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
		if n := len([]rune(line)); n > 130 || strings.Contains(line, " Charge ") && (n != 130 || !strings.HasSuffix(line, "…")) {
			t.Errorf("line of %d runes at COLUMNS=130; want rows cut to 130, ending in …: %q", n, line)
		}
	}
	t.Setenv("COLUMNS", "")

	// -o json: every field, the payload decoded with the published schema.
	res = w.dlq("", "ls", jobsSvc, "-o", "json", "--method", "Charge", "--limit", "1")
	var doc struct {
		Service     string       `json:"service"`
		DLQ         string       `json:"dlq"`
		Total       int64        `json:"total"`
		Matched     int64        `json:"matched"`
		Shown       int          `json:"shown"`
		DeadLetters []deadLetter `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &doc); err != nil || res.code != 0 {
		t.Fatalf("ls -o json: %v\n%s", err, res)
	}
	if doc.Service != jobsSvc || doc.DLQ != "rpr:v1:{"+jobsSvc+"}:dlq" || doc.Total != 6 || doc.Matched != 3 || doc.Shown != 1 || len(doc.DeadLetters) != 1 {
		t.Fatalf("ls -o json counts: %+v", doc)
	}
	first := doc.DeadLetters[0]
	job := fmt.Sprintf("order-%d", slices.Index(charges, first.RequestID)+1)
	if !slices.Contains(charges, first.RequestID) || first.Kind != "async" || first.Code != "UNAVAILABLE" || first.Attempts != 2 ||
		first.Worker != "dlq-w1" || first.Failed == nil || first.Enqueued == nil || first.Header["tenant"][0] != "acme" ||
		first.PayloadType != "rprtest.jobs.v1.JobRequest" || string(first.PayloadBase64) != string(mustMarshal(t, wrapperspb.String(job))) {
		t.Errorf("ls -o json letter: %+v", first)
	}
	var payload map[string]string
	if err := json.Unmarshal(first.Payload, &payload); err != nil || payload["job"] != job {
		t.Errorf("payload %s (%v), want {\"job\": %q}", first.Payload, err, job)
	}

	// show, by entry id and by request id.
	chargeEntry := byRequest[charges[0]][0]
	res = w.dlq("", "show", jobsSvc, chargeEntry)
	t.Logf("rpr dlq show %s %s:\n%s", jobsSvc, chargeEntry, res.stdout)
	stamp := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \(\d+(ms|\.\ds) ago\)`
	for _, want := range []string{
		`(?m)^entry      ` + regexp.QuoteMeta(chargeEntry+" in rpr:v1:{"+jobsSvc+"}:dlq") + `$`,
		`(?m)^request    ` + charges[0] + `$`,
		`(?m)^key        ` + charges[0] + ` \(the request id: no idempotency key was set\)$`,
		`(?m)^method     rprtest\.jobs\.v1\.Jobs/Charge$`,
		`(?m)^kind       async \(replayable\)$`,
		`(?m)^code       UNAVAILABLE \(14\)$`,
		`(?m)^error      payments backend is down$`,
		`(?m)^reason     attempts exhausted \(2 of 2\)$`,
		`(?m)^attempts   2$`,
		`(?m)^replays    0$`,
		`(?m)^enqueued   ` + stamp + `$`,
		`(?m)^failed     ` + stamp + `$`,
		`(?m)^worker     dlq-w1$`,
		`(?m)^metadata   tenant: acme$`,
		`(?m)^payload    rprtest\.jobs\.v1\.JobRequest, 9 bytes$`,
		`(?m)^    "job": "order-1"$`,
	} {
		if !regexp.MustCompile(want).MatchString(res.stdout) {
			t.Errorf("show lacks %s:\n%s", want, res)
		}
	}
	ages := regexp.MustCompile(`\(\S+ ago\)`)
	if byID := w.dlq("", "show", jobsSvc, charges[0]); byID.code != 0 || ages.ReplaceAllString(byID.stdout, "") != ages.ReplaceAllString(res.stdout, "") {
		t.Errorf("show by request id differs from show by entry id:\n%s", byID)
	}
	res = w.dlq("", "show", jobsSvc, garbageEntry)
	if res.code != 0 || !strings.Contains(res.stdout, "kind       unknown: the envelope does not decode") || !strings.Contains(res.stdout, "envelope   does not decode: ") ||
		!strings.Contains(res.stdout, "code       INVALID_ARGUMENT (3)") {
		t.Errorf("show of the undecodable entry:\n%s", res)
	}
	res = w.dlq("", "show", jobsSvc, "1-1")
	if res.code != 1 || !strings.Contains(res.stderr, "no dead letter 1-1 in the DLQ of "+jobsSvc+" (rpr:v1:{"+jobsSvc+"}:dlq)") {
		t.Errorf("show of an unknown id:\n%s", res)
	}
	res = w.dlq("", "show", jobsSvc, "not-an-id")
	if res.code != 2 || !strings.Contains(res.stderr, "neither an entry id") {
		t.Errorf("show of a malformed id:\n%s", res)
	}
	res = w.dlq("", "show", "rprtest.jobs.v1.Jbos", "1-1")
	if res.code != 1 || !strings.Contains(res.stderr, "no service rprtest.jobs.v1.Jbos is known") || !strings.Contains(res.stderr, "known: "+jobsSvc) {
		t.Errorf("show in a mistyped service:\n%s", res)
	}

	// Without a published schema, the payload is raw, and says why.
	schemaKey := tunnel.DefaultPrefix + "{" + jobsSvc + "}:schema"
	schema, err := w.rdb.Get(context.Background(), schemaKey).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	w.rdb.Del(context.Background(), schemaKey)
	res = w.dlq("", "show", jobsSvc, chargeEntry)
	for _, want := range []string{"payload    9 bytes; the schema of " + jobsSvc + " is not published in Redis", "0a 07 6f 72 64 65 72 2d  31", "base64     CgdvcmRlci0x"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("show without schema lacks %q:\n%s", want, res)
		}
	}
	w.rdb.Set(context.Background(), schemaKey, schema, 0)

	// drop asks; "n", an empty stdin or anything else is no.
	for _, stdin := range []string{"n\n", "", "sure\n"} {
		res = w.dlq(stdin, "drop", jobsSvc, notify)
		if res.code != 1 || !strings.Contains(res.stderr, "Drop 1 dead letter of "+jobsSvc+"? [y/N]") || !strings.Contains(res.stderr, "not confirmed: nothing dropped") {
			t.Errorf("drop answered %q:\n%s", stdin, res)
		}
	}
	if n := w.dlqLen(); n != 6 {
		t.Fatalf("after declined drops: %d dead letters, want 6", n)
	}
	res = w.dlq("y\n", "drop", jobsSvc, notify)
	if res.code != 0 || res.stdout != "dropped 1 dead letter of "+jobsSvc+"\n" {
		t.Errorf("drop answered y:\n%s", res)
	}
	res = w.dlq("", "drop", jobsSvc, "--yes", "--code", "INVALID_ARGUMENT", "--method", "Notify")
	if res.code != 0 || res.stdout != "dropped 1 dead letter of "+jobsSvc+"\n" || strings.Contains(res.stderr, "[y/N]") {
		t.Errorf("drop --yes:\n%s", res)
	}
	res = w.dlq("", "drop", jobsSvc, notify)
	if res.code != 1 || !strings.Contains(res.stderr, "no dead letter "+notify) || !strings.Contains(res.stderr, "nothing changed") {
		t.Errorf("drop of a dropped letter:\n%s", res)
	}

	// Replaying before the fix: they come back, with the replay counted.
	res = w.dlq("", "replay", jobsSvc, charges[2])
	if res.code != 0 || !strings.Contains(res.stdout, "replayed 1 of 1 dead letter of "+jobsSvc) {
		t.Fatalf("replay of one:\n%s", res)
	}
	w.waitFor("the replayed letter to fail again", func() bool {
		r := w.dlq("", "show", jobsSvc, charges[2])
		return r.code == 0 && strings.Contains(r.stdout, "replays    1\n")
	})

	// The garbage cannot be replayed: named, it is an error; it stays.
	res = w.dlq("", "replay", jobsSvc, garbageEntry)
	if res.code != 1 || !strings.Contains(res.stdout, "skipped            1") || !strings.Contains(res.stdout, garbageEntry+"  its envelope does not decode") {
		t.Errorf("replay of the undecodable entry:\n%s", res)
	}

	// The fix is deployed: replay everything.
	w.fixed.Store(true)
	res = w.dlq("", "replay", jobsSvc, "--all", "--dry-run")
	if res.code != 0 || !strings.Contains(res.stdout, "would replay 4 dead letters of "+jobsSvc+" (dry run: nothing changed)") ||
		!regexp.MustCompile(`3\s+rprtest\.jobs\.v1\.Jobs/Charge\s+UNAVAILABLE`).MatchString(res.stdout) || w.dlqLen() != 4 {
		t.Errorf("replay --dry-run:\n%s", res)
	}
	res = w.dlq("", "replay", jobsSvc, "--all")
	t.Logf("rpr dlq replay %s --all:\n%s", jobsSvc, res.stdout)
	for _, want := range []string{
		"replayed 3 of 4 dead letters of " + jobsSvc,
		"replayed           3  queued again",
		"already succeeded  0",
		"gone               0",
		"skipped            1  cannot be replayed; left in the DLQ",
		garbageEntry + "  its envelope does not decode",
	} {
		if res.code != 0 || !strings.Contains(res.stdout, want) {
			t.Errorf("replay --all lacks %q:\n%s", want, res)
		}
	}
	w.waitFor("the three orders to succeed", func() bool { return w.succeeded() == 3 })
	if n := w.dlqLen(); n != 1 {
		t.Errorf("after the replay: %d dead letters, want 1 (the garbage)", n)
	}
	res = w.dlq("", "drop", jobsSvc, "--all", "--yes")
	if res.code != 0 || !strings.Contains(res.stdout, "dropped 1 dead letter") {
		t.Errorf("drop --all --yes:\n%s", res)
	}
	res = w.dlq("", "ls", jobsSvc)
	if res.code != 0 || res.stdout != jobsSvc+" has no dead letters (rpr:v1:{"+jobsSvc+"}:dlq is empty)\n" {
		t.Errorf("ls of the empty DLQ:\n%s", res)
	}
	res = w.dlq("", "replay", jobsSvc, "--all")
	if res.code != 0 || !strings.Contains(res.stdout, "nothing to replay") {
		t.Errorf("replay of the empty DLQ:\n%s", res)
	}
}

// TestDlqReplayManyInBatches replays more letters than one batch of the
// library's replay script holds, twice: once while still broken (they
// come back, replays counted), once fixed.
func TestDlqReplayManyInBatches(t *testing.T) {
	w := newJobsWorld(t)
	const n = 320
	for i := range n {
		w.enqueue("Notify", fmt.Sprintf("customer-%03d", i))
	}
	w.waitFor(fmt.Sprint(n, " dead letters"), func() bool { return w.dlqLen() == n })

	res := w.dlq("", "replay", jobsSvc, "--method", "Notify", "--limit", "150")
	if res.code != 0 || !strings.Contains(res.stdout, "replayed 150 of 150 dead letters") || res.stderr != "" {
		t.Fatalf("replay --limit 150:\n%s", res)
	}
	w.waitFor("the 150 to fail again", func() bool {
		if w.dlqLen() != n {
			return false
		}
		letters, err := tunnel.NewDeadLetterQueue(w.rdb, "", jobsSvc).List(context.Background(), tunnel.DeadLetterFilter{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		replayed := 0
		for _, dl := range letters {
			replayed += dl.Replays
		}
		return replayed == 150
	})

	w.fixed.Store(true)
	res = w.dlq("", "replay", jobsSvc, "--all")
	if res.code != 0 || !strings.Contains(res.stdout, fmt.Sprintf("replayed %d of %d dead letters", n, n)) {
		t.Fatalf("replay --all:\n%s", res)
	}
	w.waitFor(fmt.Sprint("all ", n, " to succeed"), func() bool { return w.succeeded() == n })
	if got := w.dlqLen(); got != 0 {
		t.Errorf("%d dead letters left, want 0", got)
	}
}

// TestDlqDropMany drops a large set by filter, confirmed on stdin.
func TestDlqDropMany(t *testing.T) {
	w := newJobsWorld(t)
	const n = 210
	for i := range n {
		w.enqueue("Notify", fmt.Sprintf("customer-%03d", i))
	}
	w.waitFor(fmt.Sprint(n, " dead letters"), func() bool { return w.dlqLen() == n })
	res := w.dlq("yes\n", "drop", jobsSvc, "--code", "INVALID_ARGUMENT")
	if res.code != 0 || res.stdout != fmt.Sprintf("dropped %d dead letters of %s\n", n, jobsSvc) ||
		!regexp.MustCompile(`210\s+rprtest\.jobs\.v1\.Jobs/Notify\s+INVALID_ARGUMENT`).MatchString(res.stderr) {
		t.Fatalf("drop:\n%s", res)
	}
	if got := w.dlqLen(); got != 0 {
		t.Errorf("%d dead letters left, want 0", got)
	}
}

func TestDlqBadInput(t *testing.T) {
	// Nothing here reaches Redis: the port is closed, so a check that let
	// bad input through would fail with "connect" instead of its message.
	redisURL := "redis://127.0.0.1:1/0"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ls", jobsSvc, "--code", "NOPE"}, `invalid argument "NOPE" for "--code" flag: not a status code; use a name such as UNAVAILABLE`},
		{[]string{"ls", jobsSvc, "--code", "OK"}, "no dead letter failed with OK; use a failure code such as --code UNAVAILABLE"},
		{[]string{"ls", jobsSvc, "--older-than", "-5m"}, `"--older-than" flag: must not be negative; use e.g. --older-than 1h`},
		{[]string{"ls", jobsSvc, "--newer-than", "soon"}, `"--newer-than" flag: not a duration; use e.g. --newer-than 90s, 15m, 2h or 3d`},
		{[]string{"ls", jobsSvc, "--older-than", "2h", "--newer-than", "1h"}, "select nothing: for a window, --older-than must be the shorter, e.g. --older-than 10m --newer-than 2h"},
		{[]string{"ls", jobsSvc, "--limit", "-1"}, `"--limit" flag: want a number of dead letters, 0 for no limit, e.g. --limit 100`},
		{[]string{"ls", jobsSvc, "--limit", "many"}, `"--limit" flag: want a number`},
		{[]string{"ls", jobsSvc, "-o", "yaml"}, `-o "yaml": want table or json, e.g. -o json`},
		{[]string{"ls", jobsSvc, "--bogus"}, "unknown flag: --bogus (see rpr dlq ls --help)"},
		{[]string{"ls", jobsSvc + "/Charge"}, "names a method; name the service and filter by method: " + jobsSvc + " --method Charge"},
		{[]string{"ls"}, "usage: rpr dlq ls SERVICE"},
		{[]string{"show", jobsSvc}, "usage: rpr dlq show SERVICE ID"},
		{[]string{"show", jobsSvc, "nope"}, "neither an entry id (e.g. 1764434400123-0"},
		{[]string{"replay", jobsSvc}, "say which dead letters to replay: pass IDs (from \"rpr dlq ls " + jobsSvc + "\"), a filter (--method, --code, --older-than, --newer-than) or --all"},
		{[]string{"drop", jobsSvc}, "say which dead letters to drop"},
		{[]string{"replay", jobsSvc, "1-1", "--all"}, "pass either IDs or a selection (--all or filters), not both"},
		{[]string{"drop", jobsSvc, "1-1", "--code", "INTERNAL"}, "pass either IDs or a selection"},
		{[]string{"replay", jobsSvc, "1-1", "--limit", "3"}, "--limit applies to --all and filters, not to IDs"},
		{[]string{"replay", jobsSvc, "1-1", "what"}, `"what" is neither an entry id`},
		{[]string{"lss"}, `unknown command "lss" for "rpr dlq": did you mean ls?`},
	} {
		args := append([]string{"dlq"}, tc.args...)
		if len(tc.args) > 1 {
			args = append(args, "--redis", redisURL)
		}
		res := runDlqCLI(t, "", args...)
		if res.code != 2 || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("rpr %s: want exit 2 and %q; got\n%s", strings.Join(tc.args, " "), tc.want, res)
		}
	}
}

func TestDlqConfirm(t *testing.T) {
	for stdin, want := range map[string]bool{"y\n": true, "Y": true, "yes\n": true, " YES \n": true, "n\n": false, "": false, "\n": false, "yep\n": false} {
		var prompt bytes.Buffer
		got, err := confirm(context.Background(), strings.NewReader(stdin), &prompt, "Drop 3 dead letters of x.Y?")
		if err != nil || got != want {
			t.Errorf("answer %q: confirmed %v (%v), want %v", stdin, got, err, want)
		}
		if !strings.HasPrefix(prompt.String(), "Drop 3 dead letters of x.Y? [y/N] ") || !strings.HasSuffix(prompt.String(), "\n") {
			t.Errorf("answer %q: prompt %q", stdin, prompt.String())
		}
	}

	// A pipe nobody writes to or closes does not hang it.
	defer func(d time.Duration) { confirmWait = d }(confirmWait)
	confirmWait = 50 * time.Millisecond
	r, pw := io.Pipe()
	defer pw.Close()
	var prompt bytes.Buffer
	if got, err := confirm(context.Background(), r, &prompt, "Drop?"); got || err != nil || !strings.Contains(prompt.String(), "no answer on stdin") {
		t.Errorf("silent stdin: confirmed %v (%v), prompt %q", got, err, prompt.String())
	}
}

func TestDlqProgress(t *testing.T) {
	var buf bytes.Buffer
	if progress, finish := progressFor(&buf, 5000, "replaying"); progress != nil {
		t.Error("a progress bar on a writer that is not a terminal")
	} else {
		finish()
	}
	progress, finish := startProgressBar(&buf, 300, "replaying")
	for done := 100; done <= 300; done += 100 {
		progress(done)
	}
	finish()
	if !strings.Contains(buf.String(), "replaying") || !strings.Contains(buf.String(), "/300") {
		t.Errorf("bar output %q", buf.String())
	}
}

func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"90s": 90 * time.Second, "15m": 15 * time.Minute, "2h": 2 * time.Hour, "3d": 72 * time.Hour,
		"1d12h": 36 * time.Hour, "0": 0, "-5m": -5 * time.Minute,
	} {
		if got, err := parseAge(in); err != nil || got != want {
			t.Errorf("parseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "xd", "1x", "soon", "1d2"} {
		if got, err := parseAge(in); err == nil {
			t.Errorf("parseAge(%q) = %v; want an error", in, got)
		}
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDlqReplaySummary(t *testing.T) {
	skipped := map[string]string{}
	for i := range skippedShown + 5 {
		skipped[fmt.Sprintf("1-%02d", i)] = "a unary request: its caller stopped waiting long ago; drop it"
	}
	var out bytes.Buffer
	printReplay(&out, "x.v1.Y", 40, tunnel.ReplayResult{Replayed: 10, AlreadySucceeded: 3, Gone: 2, Skipped: skipped})
	for _, want := range []string{
		"replayed 10 of 40 dead letters of x.v1.Y\n",
		"  already succeeded   3  dropped: another request with the same idempotency key succeeded since\n",
		"  gone                2  no longer in the DLQ",
		"  skipped            25  cannot be replayed; left in the DLQ\n",
		"    1-00  a unary request: its caller stopped waiting long ago; drop it\n",
		"    1-19  a unary",
		"    … and 5 more (rpr dlq ls x.v1.Y shows them all)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "1-20") {
		t.Errorf("summary lists more than %d skipped letters:\n%s", skippedShown, out.String())
	}
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

// TestDlqShardedService: the dead letters of a 3-shard service, from two
// lanes, through the command line: listed with their "k/id" ids and
// lanes, shown, dropped and replayed by those ids; a replay of letters
// whose lane has no live server any more says they went to the default
// lane.
func TestDlqShardedService(t *testing.T) {
	w := newMailWorld(t)
	w.serve("")
	stopV2 := w.serve("v2")
	lanes := map[string]string{}
	for i := range 9 {
		// Keyed requests go to the shard their key hashes to: these nine
		// keys put three letters in each shard, every run.
		key := tunnel.WithIdempotencyKey(fmt.Sprint("letter-", i))
		value, lane := fmt.Sprint("m", i), tunnel.DefaultLane
		if i%4 == 0 {
			lane = "v2"
			lanes[w.send(value, key, tunnel.WithLane("v2"))] = lane
		} else {
			lanes[w.send(value, key)] = lane
		}
	}
	dlq := tunnel.NewDeadLetterQueue(w.rdb, "", mailSvc)
	w.waitFor("9 dead letters", func() bool { n, _ := dlq.Len(context.Background()); return n == 9 })

	run := func(stdin, verb string, args ...string) rprRun {
		t.Helper()
		return runDlqCLI(t, stdin, append([]string{"dlq", verb, "--redis", w.rs.URL()}, args...)...)
	}
	res := run("", "ls", mailSvc)
	if res.code != 0 || !strings.Contains(res.stdout, "9 dead letters of "+mailSvc+"\n") {
		t.Fatalf("ls:\n%s", res)
	}
	t.Logf("rpr dlq ls %s:\n%s", mailSvc, res.stdout)
	header, rows := dlqTable(t, res.stdout)
	if want := "ENTRY REQUEST METHOD LANE CODE ATTEMPTS AGE REASON"; strings.Join(header, " ") != want {
		t.Fatalf("header %q; want %q (a LANE column: some letters are not of the default lane)", header, want)
	}
	if len(rows) != 9 {
		t.Fatalf("%d rows, want 9:\n%s", len(rows), res.stdout)
	}
	byShard := map[string][]string{} // "0", "1", "2" -> entry ids
	for entry, f := range rows {
		shard := "0"
		if s, _, ok := strings.Cut(entry, "/"); ok {
			shard = s
		}
		byShard[shard] = append(byShard[shard], entry)
		if f[3] != lanes[f[1]] {
			t.Errorf("row %q: lane %s; want %s", f, f[3], lanes[f[1]])
		}
	}
	if len(byShard["0"]) == 0 || len(byShard["1"]) == 0 || len(byShard["2"]) == 0 || len(byShard) != 3 {
		t.Fatalf("entries by shard %v; want entries of shards 0 (plain ids), 1 and 2 (k/id)", byShard)
	}

	// show takes a "2/id"; JSON says shard and lane.
	inShard2 := byShard["2"][0]
	res = run("", "show", mailSvc, inShard2)
	for _, want := range []string{
		"entry      " + inShard2 + " in rpr:v1:{" + mailSvc + "#2}:dlq\n",
		"shard      2 of 3\n",
		"lane       " + lanes[rows[inShard2][1]] + "\n",
	} {
		if res.code != 0 || !strings.Contains(res.stdout, want) {
			t.Errorf("show %s: lacks %q:\n%s", inShard2, want, res)
		}
	}
	res = run("", "ls", mailSvc, "-o", "json")
	var doc struct {
		Streams     []string `json:"dlq_streams"`
		DeadLetters []struct {
			EntryID string `json:"entry_id"`
			Shard   int    `json:"shard"`
			Lane    string `json:"lane"`
		} `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &doc); err != nil || len(doc.Streams) != 3 || len(doc.DeadLetters) != 9 {
		t.Fatalf("ls -o json: %v, %+v\n%s", err, doc, res)
	}
	for _, dl := range doc.DeadLetters {
		if (dl.Shard == 0) == strings.Contains(dl.EntryID, "/") || dl.Lane == "" {
			t.Errorf("JSON letter %+v", dl)
		}
	}

	// Malformed ids are refused before anything happens.
	for _, id := range []string{"x/1-0", "2/", "99/1-0"} {
		if res := run("", "show", mailSvc, id); res.code != 2 || !strings.Contains(res.stderr, "2/1764434400123-0") {
			t.Errorf("show %s: want exit 2 naming the id forms:\n%s", id, res)
		}
	}

	// drop one letter of shard 1 by its id.
	inShard1 := byShard["1"][0]
	if res := run("", "drop", mailSvc, inShard1, "--yes"); res.code != 0 || res.stdout != "dropped 1 dead letter of "+mailSvc+"\n" {
		t.Fatalf("drop %s:\n%s", inShard1, res)
	}
	if _, err := dlq.Get(context.Background(), inShard1); !errors.Is(err, tunnel.ErrNoDeadLetter) {
		t.Fatalf("after drop, Get(%s): %v", inShard1, err)
	}
	if res := run("", "show", mailSvc, inShard1); res.code != 1 {
		t.Errorf("show of a dropped letter: want exit 1:\n%s", res)
	}

	// v2's servers are gone; the fix is deployed; replay everything: lane
	// v2's letters go to the default lane, and the summary says so.
	stopV2()
	w.fixed.Store(true)
	left := 0
	v2Left := 0
	for entry, f := range rows {
		if entry == inShard1 {
			continue
		}
		left++
		if f[3] == "v2" {
			v2Left++
		}
	}
	res = run("", "replay", mailSvc, "--all")
	if res.code != 0 || !strings.Contains(res.stdout, fmt.Sprintf("replayed %d of %d dead letters of %s\n", left, left, mailSvc)) ||
		!strings.Contains(res.stdout, fmt.Sprintf("note: %s of lane v2 went to the default lane instead: lane v2 has no live server\n", count(v2Left, "dead letter"))) {
		t.Fatalf("replay --all (%d letters, %d of lane v2):\n%s", left, v2Left, res)
	}
	w.waitFor("the replayed letters to run", func() bool { return len(w.delivered()) == left })
	for value, lane := range w.delivered() {
		if lane != tunnel.DefaultLane {
			t.Errorf("%s ran in lane %s; want the default lane", value, lane)
		}
	}
	if n, _ := dlq.Len(context.Background()); n != 0 {
		t.Errorf("%d dead letters left", n)
	}
	want := mailSvc + " has no dead letters (the 3 streams rpr:v1:{" + mailSvc + "}:dlq … rpr:v1:{" + mailSvc + "#2}:dlq are empty)\n"
	if res := run("", "ls", mailSvc); res.code != 0 || res.stdout != want {
		t.Errorf("ls of the empty DLQ:\n%s\nwant stdout %q", res, want)
	}
}
