package tunnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// Clients and servers write their envelopes into pooled buffers and reuse
// them once the command that carries them has returned, and a client
// reuses a unary call's state once its answer was delivered. These tests
// make many calls at once, each with its own payload of a size from a few
// bytes to past the pool's largest class of small envelopes, some given up
// on while in flight, and check that every payload arrives as it was sent:
// a buffer or a call given back too early would hand one call's bytes, or
// its wake-up, to another. A client reads large answers, and a server
// large requests, into pooled buffers too, so requests carry a header the
// handler keeps with its context, answers carry a trailer and some are
// errors whose message is the payload: what a caller or handler keeps must
// outlive the buffer it came in.

// distinctPayload is call i's payload: its number, then filler of a size
// that varies with i.
func distinctPayload(i int) string {
	sizes := []int{10, 300, 5000, 70 << 10, 200 << 10}
	head := fmt.Sprintf("call %d:", i)
	return head + strings.Repeat(string(rune('a'+i%26)), sizes[i%len(sizes)])
}

func TestEnvelopeBuffersAreNotSharedBetweenCalls(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	quiet := slog.New(slog.DiscardHandler)
	var handled sync.Map // payload prefix -> the handler's context, kept after it returned
	startServer(t, rdb, tunnel.ServerOptions{Concurrency: 32, Logger: quiet}, func(s *tunnel.Server) {
		s.RegisterService(&echoDesc, map[string]echoHandler{"Echo": func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			if in.GetValue() != "warm" { // waitAnswered's call sends no header
				handled.Store(prefix(in.GetValue()), ctx)
			}
			if err := tunnel.SetTrailer(ctx, tunnel.Metadata{"call": {prefix(in.GetValue())}}); err != nil {
				return nil, err
			}
			if strings.HasPrefix(in.GetValue(), "fail ") {
				return nil, tunnel.Errorf(tunnel.FailedPrecondition, "%s", in.GetValue())
			}
			return in, nil
		}})
	})
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	echo := method("Echo")
	waitAnswered(t, client, echo)

	const callers, calls = 16, 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered, gaveUp := 0, 0
	for c := range callers {
		wg.Go(func() {
			var kept []string // what earlier answers left the caller, read again at the end
			for k := range calls {
				i := c*calls + k
				want := distinctPayload(i)
				if i%3 == 0 {
					want = "fail " + want
				}
				ctx, cancel := context.WithCancel(context.Background())
				if i%5 == 0 { // given up on while queued, sending or waiting
					time.AfterFunc(time.Duration(i%7)*100*time.Microsecond, cancel)
				}
				got := new(wrapperspb.StringValue)
				var trailer tunnel.Metadata
				err := client.Invoke(ctx, echo, wrapperspb.String(want), got, tunnel.WithTrailer(&trailer), tunnel.WithHeader("call", prefix(want)))
				cancel()
				if e, ok := tunnel.AsError(err); ok && tunnel.CodeOf(err) == tunnel.FailedPrecondition {
					kept = append(kept, want, e.Message())
					err = nil
					got.Value = want
				}
				if err == nil {
					kept = append(kept, prefix(want), trailer.Get("call"))
				}
				mu.Lock()
				switch {
				case err == nil && got.GetValue() != want:
					t.Errorf("call %d: answer of %d bytes starting %q; want its own %d bytes", i, len(got.GetValue()), prefix(got.GetValue()), len(want))
				case err == nil:
					answered++
				case tunnel.CodeOf(err) == tunnel.Canceled:
					gaveUp++
				default:
					t.Errorf("call %d: %v", i, err)
				}
				mu.Unlock()
			}
			for j := 0; j < len(kept); j += 2 {
				if kept[j] != kept[j+1] {
					t.Errorf("caller %d kept %q (%d bytes) of an answer, which now reads %q (%d bytes)", c, prefix(kept[j]), len(kept[j]), prefix(kept[j+1]), len(kept[j+1]))
				}
			}
		})
	}
	wg.Wait()
	handled.Range(func(call, ctx any) bool {
		if got := tunnel.HeaderFromContext(ctx.(context.Context)).Get("call"); got != call {
			t.Errorf("a handler's context kept header %q; the request sent %q", got, call)
		}
		return true
	})
	t.Logf("%d calls answered with their own payload, %d cancelled", answered, gaveUp)
	if answered < callers*calls*4/5 {
		t.Errorf("%d of %d calls answered; want at least the %d never cancelled", answered, callers*calls, callers*calls*4/5)
	}
}

func TestAsyncEnvelopeBuffersAreNotSharedBetweenRequests(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	quiet := slog.New(slog.DiscardHandler)
	const producers, each = 8, 40
	var ran atomic.Int64
	impl := &jobs{runs: map[string]int{}, attempts: map[string][]int{}, at: map[string]time.Time{},
		fn: func(context.Context, *wrapperspb.StringValue) error {
			ran.Add(1)
			return nil
		}}
	startServer(t, rdb, tunnel.ServerOptions{Concurrency: 16, Logger: quiet}, func(s *tunnel.Server) {
		s.RegisterService(&jobsDesc, impl)
	})
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	// Some enqueues are given up on while queued or being written: each
	// either was not sent (and must not run) or reports its verdict, and
	// every receipt names its own request.
	var wg sync.WaitGroup
	var queued, withdrawn atomic.Int64
	sent := make([]bool, producers*each)
	receipts := make([]string, producers*each)
	for p := range producers {
		wg.Go(func() {
			for k := range each {
				i := p*each + k
				ctx, cancel := context.WithCancel(context.Background())
				if i%5 == 0 {
					time.AfterFunc(time.Duration(i%7)*100*time.Microsecond, cancel)
				}
				receipt, err := client.Enqueue(ctx, jobsMethod("Do"), wrapperspb.String(distinctPayload(i)))
				cancel()
				switch {
				case err == nil:
					sent[i], receipts[i] = true, receipt.RequestID
					queued.Add(1)
				case tunnel.CodeOf(err) == tunnel.Canceled && tunnel.NotExecuted(err):
					withdrawn.Add(1)
				default:
					t.Errorf("enqueue %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d enqueued, %d given up on before they were sent", queued.Load(), withdrawn.Load())
	if queued.Load()+withdrawn.Load() == producers*each {
		waitFor(t, "every enqueued request to run", func() bool { return ran.Load() >= queued.Load() })
	}
	impl.mu.Lock()
	defer impl.mu.Unlock()
	ids := map[string]int{}
	for i := range producers * each {
		want := 0
		if sent[i] {
			want = 1
			if prev, dup := ids[receipts[i]]; dup {
				t.Errorf("requests %d and %d got the same receipt %s", prev, i, receipts[i])
			}
			ids[receipts[i]] = i
		}
		if n := impl.runs[distinctPayload(i)]; n != want {
			t.Errorf("request %d (enqueued: %t) ran with its own payload %d times, want %d", i, sent[i], n, want)
		}
	}
	if int64(len(impl.runs)) != queued.Load() {
		t.Errorf("handlers saw %d distinct payloads, want %d (a payload nobody sent means a shared buffer)", len(impl.runs), queued.Load())
	}
}

// prefix is the start of s, for messages.
func prefix(s string) string {
	if len(s) > 16 {
		return s[:16]
	}
	return s
}
