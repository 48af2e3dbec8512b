package tunnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// The trust tests: a service whose handlers report who called them, with
// servers that trust alice and bob, and callers that are, or pretend to
// be, one of them.

const trustService = "test.v1.Vault"

var trustInfo = tunnel.ServiceInfo{Name: trustService}

// vault records what its handlers saw.
type vault struct {
	mu      sync.Mutex
	runs    map[string]int    // executions per method
	callers map[string]string // last verified caller per method ("-" when none)
	headers map[string]string // last x-rpr-caller header per method
	started chan string       // Hold: request ids as their handlers start
	release chan struct{}     // Hold: closed to let the handlers return
}

func newVault() *vault {
	return &vault{runs: map[string]int{}, callers: map[string]string{}, headers: map[string]string{},
		started: make(chan string, 16), release: make(chan struct{})}
}

func (v *vault) run(name string, ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	caller, ok := tunnel.CallerOf(ctx)
	if !ok {
		caller = "-"
	}
	v.mu.Lock()
	v.runs[name]++
	v.callers[name] = caller
	v.headers[name] = tunnel.HeaderFromContext(ctx).Get(tunnel.CallerHeader)
	v.mu.Unlock()
	if name == "Order" && in.GetValue() == "flaky" && tunnel.AttemptFromContext(ctx) == 1 {
		return nil, tunnel.Errorf(tunnel.Unavailable, "try again")
	}
	if name == "Hold" {
		v.started <- tunnel.RequestIDFromContext(ctx)
		select {
		case <-v.release:
		case <-ctx.Done():
			return nil, tunnel.NewError(tunnel.Canceled, context.Cause(ctx))
		}
	}
	return wrapperspb.String(name + " for " + caller + ": " + in.GetValue()), nil
}

func (v *vault) count(name string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.runs[name]
}

func vaultMethod(name string, async bool) tunnel.MethodDesc {
	var retry *tunnel.RetryPolicy
	if async {
		retry = fastRetry
	}
	return tunnel.MethodDesc{Service: &trustInfo, Name: name, Async: async, Retry: retry,
		Handler: func(impl any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
			in := new(wrapperspb.StringValue)
			if err := decode(in); err != nil {
				return nil, err
			}
			return impl.(*vault).run(name, ctx, in)
		}}
}

var vaultDesc = tunnel.ServiceDesc{Service: &trustInfo, Methods: []tunnel.MethodDesc{
	vaultMethod("Read", false), vaultMethod("Admin", false), vaultMethod("Hold", false), vaultMethod("Order", true),
}}

func vaultMethodDesc(name string) *tunnel.MethodDesc {
	for i := range vaultDesc.Methods {
		if vaultDesc.Methods[i].Name == name {
			return &vaultDesc.Methods[i]
		}
	}
	panic(name)
}

var (
	aliceSecret = []byte(strings.Repeat("a", 32))
	bobSecret   = []byte(strings.Repeat("b", 32))
)

// vaultTrust trusts alice with everything and bob with Read and Order.
func vaultTrust() *tunnel.Trust {
	return &tunnel.Trust{
		Callers: map[string][]byte{"alice": aliceSecret, "bob": bobSecret},
		Allow: []tunnel.Grant{{Caller: "alice", Method: "*"},
			{Caller: "bob", Method: trustService + "/Read"}, {Caller: "bob", Method: trustService + "/Order"}},
	}
}

type trustWorld struct {
	t     *testing.T
	redis *redistest.Server
	rdb   *redis.Client
	vault *vault
	trust *tunnel.Trust
	stop  func() // stops the vault's server
}

func newTrustWorld(t *testing.T, trust *tunnel.Trust) *trustWorld {
	t.Helper()
	rs := redistest.Start(t)
	w := &trustWorld{t: t, redis: rs, rdb: rs.Client(t), vault: newVault(), trust: trust}
	w.serve()
	return w
}

// serve starts the vault's server and waits for its heartbeat.
func (w *trustWorld) serve() {
	w.t.Helper()
	w.stop = serveService(w.t, w.redis, &vaultDesc, w.vault, tunnel.ServerOptions{Trust: w.trust, Logger: slog.New(slog.DiscardHandler)})
	waitFor(w.t, "the vault's server to beat", func() bool {
		n, _ := w.rdb.HLen(context.Background(), "rpr:v1:{"+trustService+"}:workers").Result()
		return n > 0
	})
}

// started waits for a Hold handler to start and returns its request id,
// or fails the test with the call's error if the call ended first.
func (w *trustWorld) started(done <-chan error) string {
	w.t.Helper()
	select {
	case id := <-w.vault.started:
		return id
	case err := <-done:
		w.t.Fatalf("Hold ended before its handler started: %v", err)
		return ""
	case <-time.After(30 * time.Second):
		w.t.Fatal("no Hold handler started within 30s")
		return ""
	}
}

func (w *trustWorld) client(id string, creds *tunnel.Credentials) *tunnel.Client {
	w.t.Helper()
	c, err := tunnel.NewClient(w.redis.Client(w.t), tunnel.ClientOptions{ID: id, Credentials: creds, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = c.Close() })
	return c
}

func call(ctx context.Context, c *tunnel.Client, name, in string, opts ...tunnel.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	err := c.Invoke(ctx, vaultMethodDesc(name), wrapperspb.String(in), out, opts...)
	return out.GetValue(), err
}

func TestTrustIdentityComesFromTheKeyNotTheHeader(t *testing.T) {
	w := newTrustWorld(t, vaultTrust())
	bob := w.client("bob-1", &tunnel.Credentials{Caller: "bob", Secret: bobSecret})
	got, err := call(context.Background(), bob, "Read", "x", tunnel.WithHeader(tunnel.CallerHeader, "alice"))
	if err != nil {
		t.Fatal(err)
	}
	if got != "Read for bob: x" || w.vault.headers["Read"] != "bob" {
		t.Errorf("bob posing as alice by header: reply %q, x-rpr-caller the handler saw %q; want bob for both", got, w.vault.headers["Read"])
	}
}

func TestTrustRefusesUnsignedUnknownAndWrongKeys(t *testing.T) {
	w := newTrustWorld(t, vaultTrust())
	ctx := context.Background()
	for name, c := range map[string]struct {
		creds *tunnel.Credentials
		code  tunnel.Code
		want  string
	}{
		"unsigned":     {nil, tunnel.Unauthenticated, "not signed"},
		"unknown":      {&tunnel.Credentials{Caller: "mallory", Secret: []byte(strings.Repeat("m", 32))}, tunnel.Unauthenticated, `caller "mallory" is not one this server trusts`},
		"wrong secret": {&tunnel.Credentials{Caller: "alice", Secret: bobSecret}, tunnel.Unauthenticated, `signature of caller "alice" does not verify`},
		"not allowed":  {&tunnel.Credentials{Caller: "bob", Secret: bobSecret}, tunnel.PermissionDenied, `caller "bob" may not call this method`},
	} {
		_, err := call(ctx, w.client("c-"+strings.ReplaceAll(name, " ", "-"), c.creds), "Admin", "x")
		if tunnel.CodeOf(err) != c.code || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %s mentioning %q", name, err, c.code, c.want)
		}
	}
	if n := w.vault.count("Admin"); n != 0 {
		t.Errorf("Admin ran %d times for callers that may not call it", n)
	}
	alice := w.client("alice-1", &tunnel.Credentials{Caller: "alice", Secret: aliceSecret})
	if got, err := call(ctx, alice, "Admin", "x"); err != nil || got != "Admin for alice: x" {
		t.Errorf("alice: %q, %v", got, err)
	}
}

func TestTrustSignedClientRejectsForgedAnswers(t *testing.T) {
	w := newTrustWorld(t, vaultTrust())
	alice := w.client("alice-1", &tunnel.Credentials{Caller: "alice", Secret: aliceSecret})
	done := make(chan error, 1)
	var got string
	go func() {
		var err error
		got, err = call(context.Background(), alice, "Hold", "real", tunnel.WithTimeout(20*time.Second))
		done <- err
	}()
	rid := w.started(done)
	replyTo := "rpr:v1:{" + trustService + "}:resp:alice-1"
	mallory, _ := wire.NewCallerKey(bobSecret)
	for _, forged := range []*wire.Response{
		{Version: wire.Version, ID: rid, Payload: mustMarshal(wrapperspb.String("forged, unsigned"))},
		signedBy(mallory, &wire.Response{Version: wire.Version, ID: rid, Payload: mustMarshal(wrapperspb.String("forged, signed by bob"))}),
	} {
		raw, err := wire.EncodeResponse(forged)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: replyTo, Values: []any{wire.Field, raw}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the client to read both forged answers", func() bool {
		info, _ := w.rdb.XInfoGroups(context.Background(), replyTo).Result()
		return len(info) == 1 && info[0].EntriesRead >= 2
	})
	select {
	case err := <-done:
		t.Fatalf("the call took a forged answer: %q, %v", got, err)
	default:
	}
	close(w.vault.release)
	if err := <-done; err != nil || got != "Hold for alice: real" {
		t.Errorf("after the forgeries, the real answer: %q, %v", got, err)
	}
}

func signedBy(k *wire.CallerKey, resp *wire.Response) *wire.Response {
	k.SignResponse(resp)
	return resp
}

func TestTrustSealedRequestsAreNotReadableInRedis(t *testing.T) {
	w := newTrustWorld(t, vaultTrust())
	alice := w.client("alice-1", &tunnel.Credentials{Caller: "alice", Secret: aliceSecret, Seal: true})
	done := make(chan error, 1)
	var got string
	go func() {
		var err error
		got, err = call(context.Background(), alice, "Hold", "card 4111-1111", tunnel.WithHeader("authorization", "Bearer hunter2"), tunnel.WithTimeout(20*time.Second))
		done <- err
	}()
	w.started(done)
	entries, err := w.rdb.XRange(context.Background(), "rpr:v1:{"+trustService+"}:req", "-", "+").Result()
	if err != nil || len(entries) != 1 {
		t.Fatalf("request stream: %v entries, %v", len(entries), err)
	}
	raw := fmt.Sprint(entries[0].Values)
	for _, secret := range []string{"4111", "hunter2", "authorization"} {
		if strings.Contains(raw, secret) {
			t.Errorf("the request entry shows %q to a reader of Redis", secret)
		}
	}
	close(w.vault.release)
	if err := <-done; err != nil || got != "Hold for alice: card 4111-1111" {
		t.Errorf("sealed call: %q, %v", got, err)
	}
	if _, err := alice.NewStream(context.Background(), &tunnel.MethodDesc{Service: &trustInfo, Name: "Watch", ServerStreams: true}); tunnel.CodeOf(err) != tunnel.FailedPrecondition || !tunnel.NotExecuted(err) {
		t.Errorf("a sealed stream: err = %v, want FAILED_PRECONDITION, not executed", err)
	}
}

func TestTrustOnlyTheCallerCancelsItsCall(t *testing.T) {
	w := newTrustWorld(t, vaultTrust())
	alice := w.client("alice-1", &tunnel.Credentials{Caller: "alice", Secret: aliceSecret})
	hold := func(done chan error) string {
		go func() {
			_, err := call(context.Background(), alice, "Hold", "x", tunnel.WithTimeout(20*time.Second))
			done <- err
		}()
		return w.started(done)
	}
	doneA, doneB := make(chan error, 1), make(chan error, 1)
	a, b := hold(doneA), hold(doneB)
	channel := "rpr:v1:{" + trustService + "}:cancel"
	bobKey, _ := wire.NewCallerKey(bobSecret)
	aliceKey, _ := wire.NewCallerKey(aliceSecret)
	// Forged cancels of a, then alice's own cancel of b: the server reads
	// the channel in order, so once b is cancelled the forgeries have
	// been handled.
	for _, msg := range []string{a, bobKey.CancelMessage(trustService, a, "bob"), bobKey.CancelMessage(trustService, a, "alice"),
		aliceKey.CancelMessage(trustService, b, "alice")} {
		if n, err := w.rdb.Publish(context.Background(), channel, msg).Result(); err != nil || n != 1 {
			t.Fatalf("publish a cancel: %d receivers, %v", n, err)
		}
	}
	if err := <-doneB; tunnel.CodeOf(err) != tunnel.Canceled {
		t.Errorf("b, cancelled by alice's signed cancel: err = %v", err)
	}
	select {
	case err := <-doneA:
		t.Fatalf("a forged cancel ended alice's call: %v", err)
	default:
	}
	close(w.vault.release)
	if err := <-doneA; err != nil {
		t.Errorf("a, after the forged cancels: %v", err)
	}
}

func TestTrustIdempotencyKeysArePerCaller(t *testing.T) {
	w := newTrustWorld(t, vaultTrust())
	ctx := context.Background()
	for _, who := range []struct {
		name   string
		secret []byte
	}{{"bob", bobSecret}, {"alice", aliceSecret}, {"alice", aliceSecret}} {
		c := w.client(who.name+"-"+fmt.Sprint(time.Now().UnixNano()), &tunnel.Credentials{Caller: who.name, Secret: who.secret})
		if _, err := c.Enqueue(ctx, vaultMethodDesc("Order"), wrapperspb.String(who.name), tunnel.WithIdempotencyKey("order-1001")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "bob's and alice's orders to run", func() bool { return w.vault.count("Order") >= 2 })
	waitFor(t, "the queue to drain", func() bool {
		n, _ := w.rdb.XLen(ctx, "rpr:v1:{"+trustService+"}:req").Result()
		return n == 0
	})
	if n := w.vault.count("Order"); n != 2 {
		t.Errorf("Order ran %d times, want 2: once for bob's key order-1001 and once for alice's (her second is a duplicate)", n)
	}
	for _, state := range []string{"bob/order-1001", "alice/order-1001"} {
		if got, err := w.rdb.HGet(ctx, "rpr:v1:{"+trustService+"}:st:"+state, "state").Result(); err != nil || got != wire.StateSuccess {
			t.Errorf("state %s = %q, %v", state, got, err)
		}
	}
}

func TestTrustACopyOfASignedRequestDoesNotRunAgain(t *testing.T) {
	if n := runCopyOfSignedRequest(t, vaultTrust()); n != 1 {
		t.Errorf("Hold ran %d times: a copy of a signed request ran again", n)
	}
}

// TestTrustAllowCopies: Trust.AllowCopies trades the replay check for the
// fast path, and a copy does run again.
func TestTrustAllowCopies(t *testing.T) {
	trust := vaultTrust()
	trust.AllowCopies = true
	if n := runCopyOfSignedRequest(t, trust); n != 2 {
		t.Errorf("Hold ran %d times with AllowCopies, want 2 (the original and its copy)", n)
	}
}

// runCopyOfSignedRequest makes a signed Hold call, writes a copy of its
// request entry once it has been answered, and returns how often Hold ran
// once the copy is retired.
func runCopyOfSignedRequest(t *testing.T, trust *tunnel.Trust) int {
	w := newTrustWorld(t, trust)
	alice := w.client("alice-1", &tunnel.Credentials{Caller: "alice", Secret: aliceSecret})
	done := make(chan error, 1)
	go func() {
		_, err := call(context.Background(), alice, "Hold", "pay 10", tunnel.WithTimeout(20*time.Second))
		done <- err
	}()
	w.started(done)
	ctx := context.Background()
	stream := "rpr:v1:{" + trustService + "}:req"
	entries, err := w.rdb.XRange(ctx, stream, "-", "+").Result()
	if err != nil || len(entries) != 1 {
		t.Fatalf("request stream: %d entries, %v", len(entries), err)
	}
	close(w.vault.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The copy, written while its deadline still holds, for a server that
	// has finished with the original: a worker that reads a request id it
	// is still running (its answer is out, its bookkeeping not yet done)
	// leaves the entry pending, for a reclaim to settle, which would make
	// the count depend on timing. A stopped server has finished.
	w.stop()
	if err := w.rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: entries[0].Values}).Err(); err != nil {
		t.Fatal(err)
	}
	w.serve()
	waitFor(t, "the copy to be retired", func() bool {
		n, _ := w.rdb.XLen(ctx, stream).Result()
		return n == 0
	})
	return w.vault.count("Hold")
}

func TestSignedCallToAServerWithoutTrust(t *testing.T) {
	w := newTrustWorld(t, nil)
	alice := w.client("alice-1", &tunnel.Credentials{Caller: "alice", Secret: aliceSecret})
	_, err := call(context.Background(), alice, "Read", "x")
	if tunnel.CodeOf(err) != tunnel.FailedPrecondition || !strings.Contains(err.Error(), "has no ServerOptions.Trust") {
		t.Errorf("err = %v", err)
	}
	if n := w.vault.count("Read"); n != 0 {
		t.Errorf("Read ran %d times", n)
	}
	// Unsigned callers are served as before.
	if got, err := call(context.Background(), w.client("anon", nil), "Read", "x"); err != nil || got != "Read for -: x" {
		t.Errorf("unsigned: %q, %v", got, err)
	}
}

func TestTrustAllowUnsigned(t *testing.T) {
	trust := vaultTrust()
	trust.AllowUnsigned = true
	w := newTrustWorld(t, trust)
	if got, err := call(context.Background(), w.client("anon", nil), "Read", "x"); err != nil || got != "Read for -: x" {
		t.Errorf("unsigned with AllowUnsigned: %q, %v", got, err)
	}
	_, err := call(context.Background(), w.client("alice-bad", &tunnel.Credentials{Caller: "alice", Secret: bobSecret}), "Read", "x")
	if tunnel.CodeOf(err) != tunnel.Unauthenticated {
		t.Errorf("a bad signature with AllowUnsigned: err = %v", err)
	}
}

func TestTrustOptionsAreChecked(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for name, c := range map[string]struct {
		trust *tunnel.Trust
		want  string
	}{
		"no callers":     {&tunnel.Trust{}, "lists no callers"},
		"short secret":   {&tunnel.Trust{Callers: map[string][]byte{"a": []byte("short")}}, "at least 32"},
		"bad name":       {&tunnel.Trust{Callers: map[string][]byte{"a/b": aliceSecret}}, "caller name"},
		"unknown grant":  {&tunnel.Trust{Callers: map[string][]byte{"a": aliceSecret}, Allow: []tunnel.Grant{{Caller: "b", Method: "*"}}}, `caller "b" is not in Trust.Callers`},
		"method pattern": {&tunnel.Trust{Callers: map[string][]byte{"a": aliceSecret}, Allow: []tunnel.Grant{{Caller: "a", Method: "Read"}}}, "pkg.Svc/Method"},
	} {
		if _, err := tunnel.NewServer(rdb, tunnel.ServerOptions{Trust: c.trust}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, c.want)
		}
	}
	if _, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Credentials: &tunnel.Credentials{Caller: "a", Secret: []byte("x")}}); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("client with a short secret: err = %v", err)
	}
	if _, err := tunnel.ParseCallerSecret("not base64!"); err == nil {
		t.Error("ParseCallerSecret took garbage")
	}
	secret := tunnel.NewCallerSecret()
	if back, err := tunnel.ParseCallerSecret(tunnel.EncodeCallerSecret(secret)); err != nil || string(back) != string(secret) {
		t.Errorf("secret round trip: %v", err)
	}
}

func TestTrustSignedStreams(t *testing.T) {
	trust := &tunnel.Trust{Callers: map[string][]byte{"alice": aliceSecret}}
	e := newStreamEnv(t, tunnel.ServerOptions{Trust: trust}, tunnel.ClientOptions{Credentials: &tunnel.Credentials{Caller: "alice", Secret: aliceSecret}})
	s, err := e.count(context.Background(), 20)
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvAll(s)
	if err != nil || len(got) != 20 {
		t.Fatalf("a signed stream: %d messages, %v", len(got), err)
	}
	// An unsigned caller cannot open one.
	anon, err := tunnel.NewClient(e.rdb, tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	s2, err := anon.NewStream(context.Background(), streamMethod("Count"))
	if err == nil {
		x := &tunnel.GenericClientStream[sv, sv]{ClientStream: s2}
		if err = x.SendMsg(wrapperspb.String("3")); err == nil {
			_ = x.CloseSend()
			_, err = recvAll(x)
		}
	}
	if tunnel.CodeOf(err) != tunnel.Unauthenticated {
		t.Errorf("an unsigned stream to a server with Trust: err = %v, want UNAUTHENTICATED", err)
	}
}

func TestTrustStreamNotGranted(t *testing.T) {
	trust := &tunnel.Trust{Callers: map[string][]byte{"alice": aliceSecret},
		Allow: []tunnel.Grant{{Caller: "alice", Method: streamMethod("Count").FullMethod()}}}
	e := newStreamEnv(t, tunnel.ServerOptions{Trust: trust}, tunnel.ClientOptions{Credentials: &tunnel.Credentials{Caller: "alice", Secret: aliceSecret}})
	s, err := e.client.NewStream(context.Background(), streamMethod("Sum"))
	if err != nil {
		t.Fatal(err)
	}
	sum := &tunnel.GenericClientStream[sv, sv]{ClientStream: s}
	if err = sum.Send(wrapperspb.String("1")); err == nil {
		_, err = sum.CloseAndRecv()
	}
	if tunnel.CodeOf(err) != tunnel.PermissionDenied || !strings.Contains(err.Error(), `caller "alice" may not call this method`) {
		t.Errorf("a stream alice is not granted: err = %v, want PERMISSION_DENIED", err)
	}
}
