package tunnel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

func TestUnaryRoundTrip(t *testing.T) {
	e := newEnv(t, envConfig{})
	got, err := e.call(context.Background(), "Echo", "hello")
	if err != nil || got != "echo: hello" {
		t.Fatalf("Echo = %q, %v; want %q, nil", got, err, "echo: hello")
	}
}

func TestUnaryConcurrentCallsAllAnswered(t *testing.T) {
	e := newEnv(t, envConfig{})
	const n = 500
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			in := strings.Repeat("a", i%7) + string(rune('A'+i%26))
			got, err := e.call(context.Background(), "Echo", in)
			if err != nil || got != "echo: "+in {
				errs <- errors.Join(err, errors.New("got "+got))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestErrorCodeMessageAndDetails(t *testing.T) {
	e := newEnv(t, envConfig{})
	_, err := e.call(context.Background(), "Fail", "42")
	if tunnel.CodeOf(err) != tunnel.NotFound {
		t.Fatalf("code = %v (%v), want NOT_FOUND", tunnel.CodeOf(err), err)
	}
	var te *tunnel.Error
	if !errors.As(err, &te) || te.Message() != `order "42" not found` {
		t.Fatalf("message = %v", err)
	}
	if len(te.Details()) != 1 {
		t.Fatalf("details = %v, want 1", te.Details())
	}
	d := new(wrapperspb.StringValue)
	if err := te.Details()[0].UnmarshalTo(d); err != nil || d.GetValue() != "detail:42" {
		t.Fatalf("detail = %v, %v", d, err)
	}
}

func TestHandlerPanicBecomesInternalAndServerKeepsServing(t *testing.T) {
	e := newEnv(t, envConfig{})
	_, err := e.call(context.Background(), "Panic", "x")
	if tunnel.CodeOf(err) != tunnel.Internal || !strings.Contains(err.Error(), "boom: x") {
		t.Fatalf("err = %v, want INTERNAL naming the panic", err)
	}
	if got, err := e.call(context.Background(), "Echo", "after"); err != nil || got != "echo: after" {
		t.Fatalf("after panic: %q, %v", got, err)
	}
	if !strings.Contains(e.logs.String(), "handler panicked") {
		t.Error("panic not logged")
	}
}

func TestUnknownMethodIsUnimplemented(t *testing.T) {
	e := newEnv(t, envConfig{})
	_, err := e.call(context.Background(), "NoSuchMethod", "x")
	if tunnel.CodeOf(err) != tunnel.Unimplemented || !strings.Contains(err.Error(), "test.v1.Echo/NoSuchMethod") {
		t.Fatalf("err = %v, want UNIMPLEMENTED naming the method", err)
	}
}

func TestNoLiveServerFailsFastWithUnavailable(t *testing.T) {
	e := newEnv(t, envConfig{noServe: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := e.call(ctx, "Echo", "x")
	if tunnel.CodeOf(err) != tunnel.Unavailable || !strings.Contains(err.Error(), echoService) {
		t.Fatalf("err = %v, want UNAVAILABLE naming the service", err)
	}
	if ctx.Err() != nil {
		t.Fatal("call waited for its deadline instead of failing fast")
	}
}

func TestDeadlineExceeded(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := e.call(ctx, "Slow", "5s")
	if tunnel.CodeOf(err) != tunnel.DeadlineExceeded {
		t.Fatalf("err = %v, want DEADLINE_EXCEEDED", err)
	}
	// The handler's context carries the same deadline, so it gives up with
	// DEADLINE_EXCEEDED; a handler that ignored the deadline would end
	// with a reply after 5 s.
	waitFor(t, "the handler to end", func() bool { return e.result("Slow") != nil })
	if code := tunnel.CodeOf(e.result("Slow")); code != tunnel.DeadlineExceeded {
		t.Fatalf("the handler ended with %v, want DEADLINE_EXCEEDED: it did not see the deadline", e.result("Slow"))
	}
}

func TestWithTimeoutCallOption(t *testing.T) {
	e := newEnv(t, envConfig{})
	_, err := e.call(context.Background(), "Slow", "5s", tunnel.WithTimeout(100*time.Millisecond))
	if tunnel.CodeOf(err) != tunnel.DeadlineExceeded {
		t.Fatalf("err = %v, want DEADLINE_EXCEEDED", err)
	}
}

func TestMethodDefaultTimeoutApplies(t *testing.T) {
	e := newEnv(t, envConfig{})
	m := *method("Slow")
	m.Timeout = 100 * time.Millisecond
	err := e.client.Invoke(context.Background(), &m, wrapperspb.String("5s"), new(wrapperspb.StringValue))
	if tunnel.CodeOf(err) != tunnel.DeadlineExceeded {
		t.Fatalf("err = %v, want DEADLINE_EXCEEDED from the method's default timeout", err)
	}
}

func TestCancellation(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.call(ctx, "Slow", "5s")
		done <- err
	}()
	waitFor(t, "the handler to start", func() bool { return e.count("Slow") == 1 })
	cancel()
	if err := <-done; tunnel.CodeOf(err) != tunnel.Canceled || tunnel.NotExecuted(err) {
		t.Fatalf("err = %v, want CANCELED that may have executed", err)
	}
	// the server hears of it and cancels the running handler, which ends
	// early instead of replying after 5 s
	waitFor(t, "the server to cancel the handler", func() bool {
		return strings.Contains(e.logs.String(), "caller cancelled; cancelling its handler")
	})
	waitFor(t, "the handler to end", func() bool { return e.result("Slow") != nil })
	if err := e.result("Slow"); errors.Is(err, errHandlerOK) {
		t.Errorf("the handler ran to its end: it was not cancelled")
	}
}

func TestMetadataBothWays(t *testing.T) {
	e := newEnv(t, envConfig{})
	var header, trailer tunnel.Metadata
	got, err := e.call(context.Background(), "Meta", "",
		tunnel.WithHeader("Tenant", "acme"), tunnel.WithHeader("tenant", "beta"),
		tunnel.WithResponseHeader(&header), tunnel.WithTrailer(&trailer))
	if err != nil {
		t.Fatal(err)
	}
	if got != "acme,beta" {
		t.Errorf("server saw tenant %q, want acme,beta", got)
	}
	if header.Get("x-served-by") != "test" {
		t.Errorf("response header = %v", header)
	}
	if _, err := tunnel.ParseRequestID(trailer.Get("x-request-id")); err != nil {
		t.Errorf("trailer request id: %v", err)
	}
}

func TestInterceptorsChainInOrder(t *testing.T) {
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	clientI := func(name string) tunnel.UnaryClientInterceptor {
		return func(ctx context.Context, m *tunnel.MethodDesc, req, reply proto.Message, invoker tunnel.UnaryInvoker, opts ...tunnel.CallOption) error {
			note("client " + name)
			return invoker(ctx, m, req, reply, append(opts, tunnel.WithHeader("via", name))...)
		}
	}
	serverI := func(name string) tunnel.UnaryServerInterceptor {
		return func(ctx context.Context, req proto.Message, info *tunnel.UnaryServerInfo, h tunnel.UnaryHandler) (proto.Message, error) {
			if info.FullMethod == echoService+"/Meta" {
				note("server " + name + " " + strings.Join(tunnel.HeaderFromContext(ctx).Values("via"), ","))
			}
			return h(ctx, req)
		}
	}
	e := newEnv(t, envConfig{
		client: tunnel.ClientOptions{Interceptors: []tunnel.UnaryClientInterceptor{clientI("a"), clientI("b")}},
		server: tunnel.ServerOptions{Interceptors: []tunnel.UnaryServerInterceptor{serverI("x"), serverI("y")}},
	})
	mu.Lock()
	order = nil // drop the liveness probe's calls
	mu.Unlock()
	if _, err := e.call(context.Background(), "Meta", ""); err != nil {
		t.Fatal(err)
	}
	want := "client a|client b|server x a,b|server y a,b"
	if got := strings.Join(order, "|"); got != want {
		t.Fatalf("order = %q, want %q", got, want)
	}
}

func TestGracefulShutdownAnswersInFlightCalls(t *testing.T) {
	e := newEnv(t, envConfig{})
	done := make(chan error, 1)
	go func() {
		got, err := e.call(context.Background(), "Slow", "500ms")
		if err == nil && got != "slept 500ms" {
			err = errors.New("wrong reply " + got)
		}
		done <- err
	}()
	waitFor(t, "the handler to start", func() bool { return e.count("Slow") == 1 })
	e.stopServerAndWait()
	if err := <-done; err != nil {
		t.Fatalf("in-flight call during shutdown: %v", err)
	}
	// a stopped server removes its heartbeat: new calls fail fast
	waitFor(t, "clients to see no live server", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := e.call(ctx, "Echo", "x")
		return tunnel.CodeOf(err) == tunnel.Unavailable
	})
}

// TestNoLiveServerSaysHowLongItsServersAreSilent: a call that finds no
// live server says whether any server ever beat under the prefix (a wrong
// Redis or prefix) or how long ago the last one did, and which it was (a
// stopped or stalled server), so that the two are told apart from the
// error alone.
func TestNoLiveServerSaysHowLongItsServersAreSilent(t *testing.T) {
	e := newEnv(t, envConfig{noServe: true})
	_, err := e.call(context.Background(), "Echo", "x")
	if tunnel.CodeOf(err) != tunnel.Unavailable || !strings.Contains(err.Error(), "no worker heartbeat in the last 5s under prefix") {
		t.Fatalf("with no server ever: %v; want UNAVAILABLE naming the prefix", err)
	}
	ctx := context.Background()
	now, err := e.rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	stalled := fmt.Sprintf(`{"host":"h","pid":1,"started_ms":1,"beat_ms":%d}`, now.Add(-42*time.Second).UnixMilli())
	if err := e.rdb.HSet(ctx, "rpr:v1:{"+echoDesc.Service.Name+"}:workers", "w-stalled", stalled).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = e.call(ctx, "Echo", "x")
	for _, want := range []string{"no live server for service " + echoDesc.Service.Name, "last worker heartbeat came 42", "from w-stalled", "`rpr ls`"} {
		if tunnel.CodeOf(err) != tunnel.Unavailable || !strings.Contains(err.Error(), want) {
			t.Fatalf("with a server silent for 42s: %v; want UNAVAILABLE saying %q", err, want)
		}
	}
	// A live server of another lane only: the default lane has none. (It
	// beats a minute ahead, so that it is live however slow the run.)
	canary := fmt.Sprintf(`{"host":"h","pid":2,"started_ms":1,"beat_ms":%d,"lane":"canary"}`, now.UnixMilli()+60_000)
	if err := e.rdb.HSet(ctx, "rpr:v1:{"+echoDesc.Service.Name+"}:workers", "w-canary", canary).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = e.call(ctx, "Echo", "x")
	if want := "no live server in lane default of service " + echoDesc.Service.Name + " (servers of other lanes are up): start one without ServerOptions.Lane"; tunnel.CodeOf(err) != tunnel.Unavailable || !strings.Contains(err.Error(), want) {
		t.Fatalf("with a live server in another lane only: %v; want UNAVAILABLE saying %q", err, want)
	}
}

func TestRequestSizeLimits(t *testing.T) {
	e := newEnv(t, envConfig{
		client: tunnel.ClientOptions{MaxRequestBytes: 1000},
		server: tunnel.ServerOptions{MaxRequestBytes: 500, MaxResponseBytes: 2000},
	})
	_, err := e.call(context.Background(), "Echo", strings.Repeat("x", 2000))
	if tunnel.CodeOf(err) != tunnel.ResourceExhausted || !strings.Contains(err.Error(), "MaxRequestBytes") {
		t.Fatalf("client-side limit: %v", err)
	}
	_, err = e.call(context.Background(), "Echo", strings.Repeat("x", 800))
	if tunnel.CodeOf(err) != tunnel.ResourceExhausted || !strings.Contains(err.Error(), "server's 500-byte limit") {
		t.Fatalf("server-side request limit: %v", err)
	}
	_, err = e.call(context.Background(), "Big", "5000")
	if tunnel.CodeOf(err) != tunnel.ResourceExhausted || !strings.Contains(err.Error(), "MaxResponseBytes") {
		t.Fatalf("server-side response limit: %v", err)
	}
	if got, err := e.call(context.Background(), "Big", "100"); err != nil || len(got) != 100 {
		t.Fatalf("small response: %d bytes, %v", len(got), err)
	}
}

func TestClientResponseSizeLimit(t *testing.T) {
	e := newEnv(t, envConfig{client: tunnel.ClientOptions{MaxResponseBytes: 1000}})
	_, err := e.call(context.Background(), "Big", "5000")
	if tunnel.CodeOf(err) != tunnel.ResourceExhausted || !strings.Contains(err.Error(), "ClientOptions.MaxResponseBytes") {
		t.Fatalf("err = %v", err)
	}
}

func TestDefaultSizeLimitIsFourMiB(t *testing.T) {
	e := newEnv(t, envConfig{})
	_, err := e.call(context.Background(), "Echo", strings.Repeat("x", 4<<20+1))
	if tunnel.CodeOf(err) != tunnel.ResourceExhausted {
		t.Fatalf("err = %v, want RESOURCE_EXHAUSTED", err)
	}
}

func TestClosedClientRefusesCalls(t *testing.T) {
	e := newEnv(t, envConfig{})
	inFlight := make(chan error, 1)
	go func() {
		_, err := e.call(context.Background(), "Slow", "3s")
		inFlight <- err
	}()
	waitFor(t, "the handler to start", func() bool { return e.count("Slow") == 1 })
	if err := e.client.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-inFlight; tunnel.CodeOf(err) != tunnel.Canceled {
		t.Fatalf("in-flight call: %v, want CANCELED", err)
	}
	if _, err := e.call(context.Background(), "Echo", "x"); tunnel.CodeOf(err) != tunnel.Canceled {
		t.Fatalf("after close: %v, want CANCELED", err)
	}
}

func TestTooSmallPoolIsRefusedWithTheFix(t *testing.T) {
	rs := redistest.Start(t)
	small := redis.NewClient(&redis.Options{Addr: rs.Addr(), PoolSize: 4})
	defer small.Close()
	srv, err := tunnel.NewServer(small, tunnel.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv.RegisterService(&echoDesc, map[string]echoHandler{})
	err = srv.Serve(context.Background())
	if err == nil || !strings.Contains(err.Error(), "pool_size=5") {
		t.Fatalf("Serve = %v, want a refusal naming pool_size=5", err)
	}
	client, err := tunnel.NewClient(small, tunnel.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	err = client.Invoke(context.Background(), method("Echo"), wrapperspb.String("x"), new(wrapperspb.StringValue))
	if tunnel.CodeOf(err) != tunnel.ResourceExhausted || !strings.Contains(err.Error(), "pool_size") {
		t.Fatalf("Invoke = %v, want RESOURCE_EXHAUSTED naming pool_size", err)
	}
}

// TestEveryErrorNamesItsCall checks the one format of a failed call's
// error: "rpr: CODE: pkg.Service/Method [request id]: what happened",
// whoever made it (the handler, the server, the client), while Message
// keeps the handler's own text.
func TestEveryErrorNamesItsCall(t *testing.T) {
	e := newEnv(t, envConfig{})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		method string
		ctx    context.Context
		code   tunnel.Code
	}{
		{"Fail", context.Background(), tunnel.NotFound},              // the handler's error
		{"NoSuchMethod", context.Background(), tunnel.Unimplemented}, // the server's
		{"Echo", cancelled, tunnel.Canceled},                         // the client's
	}
	for _, c := range cases {
		var id string
		_, err := e.call(c.ctx, c.method, "42", tunnel.CaptureRequestID(&id))
		want := "rpr: " + c.code.String() + ": " + echoService + "/" + c.method + " [" + id + "]: "
		if tunnel.CodeOf(err) != c.code || !strings.HasPrefix(err.Error(), want) || strings.Count(err.Error(), id) != 1 {
			t.Errorf("%s: error %q, want %s once at its start", c.method, err, want)
		}
	}
	_, err := e.call(context.Background(), "Fail", "42")
	if te, ok := tunnel.AsError(err); !ok || te.Message() != `order "42" not found` {
		t.Errorf("Message() = %q, want the handler's own text", te.Message())
	}
}

// TestEndedContextIsNeverSentNorCounted: a call whose context is already
// cancelled, or whose deadline has already passed (a budget spent
// upstream), is not sent, fails with the code of ctx.Err(), NotExecuted,
// and no circuit breaker counts it: many such calls leave a healthy
// service callable.
func TestEndedContextIsNeverSentNorCounted(t *testing.T) {
	e := newEnv(t, envConfig{})
	if _, err := e.call(context.Background(), "Echo", "warm"); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelExpired()
	streamKey := "rpr:v1:{" + echoService + "}:req"
	before := e.rdb.XLen(context.Background(), streamKey).Val()
	for i := range 20 {
		ctx, want := cancelled, tunnel.Canceled
		if i%2 == 1 {
			ctx, want = expired, tunnel.DeadlineExceeded
		}
		_, err := e.call(ctx, "Echo", "never")
		if tunnel.CodeOf(err) != want || !tunnel.NotExecuted(err) || !strings.Contains(err.Error(), "not sent") {
			t.Fatalf("call %d: %v, want %v, NotExecuted, saying it was not sent", i, err, want)
		}
	}
	if after := e.rdb.XLen(context.Background(), streamKey).Val(); after != before {
		t.Errorf("the request stream grew from %d to %d entries: calls with ended contexts were sent", before, after)
	}
	if got, err := e.call(context.Background(), "Echo", "after"); err != nil || got != "echo: after" {
		t.Fatalf("a call after 20 ended-context calls: %q, %v; want it answered (no breaker open)", got, err)
	}
	if e.calls["never"] != 0 {
		t.Errorf("the handler ran %d calls with ended contexts", e.calls["never"])
	}
}

// TestRefusedWriteIsNotExecuted: Redis at its maxmemory refuses the
// request's write (OOM): the call fails NotExecuted, so that it is safe to
// retry whatever the method does, and the next call after memory is
// available succeeds.
func TestRefusedWriteIsNotExecuted(t *testing.T) {
	e := newEnv(t, envConfig{client: tunnel.ClientOptions{Breaker: tunnel.BreakerOptions{Disabled: true}}})
	ctx := context.Background()
	if _, err := e.call(ctx, "Echo", "warm"); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := e.call(ctx, "Echo", "refused")
	if err := e.rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if tunnel.CodeOf(err) != tunnel.Unavailable || !tunnel.NotExecuted(err) || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("call under OOM: %v; want UNAVAILABLE, NotExecuted, naming OOM", err)
	}
	if e.calls["refused"] != 0 {
		t.Errorf("the refused call ran %d times", e.calls["refused"])
	}
	if _, err := e.call(ctx, "Echo", "after"); err != nil {
		t.Fatalf("after memory came back: %v", err)
	}
}
