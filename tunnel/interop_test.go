package tunnel_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/examples/greeter/greeter"
	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	ordersv1 "github.com/rprtunnel/rpr/gen/examples/orders/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// The v1 runtime's envelopes and keys, captured from a run of it (see
// internal/wire/testdata): these tests check that this runtime and a v1
// peer work together, in both directions, over the same Redis.

type v1Run struct {
	ClientID        string   `json:"client_id"`
	UnaryRequest    string   `json:"unary_request_hex"`
	FailedRequest   string   `json:"failed_request_hex"`
	UnaryResponse   string   `json:"unary_response_hex"`
	FailedResponse  string   `json:"failed_response_hex"`
	AsyncRequest    string   `json:"async_request_hex"`
	AsyncKeyRequest string   `json:"async_key_request_hex"`
	Keys            []string `json:"keys"`
}

func loadV1Run(t *testing.T) v1Run {
	t.Helper()
	raw, err := os.ReadFile("../internal/wire/testdata/v1-captured.json")
	if err != nil {
		t.Fatal(err)
	}
	var run v1Run
	if err := json.Unmarshal(raw, &run); err != nil {
		t.Fatal(err)
	}
	return run
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// shippedOrders records the orders its ShipOrder ran for.
type shippedOrders struct {
	ordersv1.UnimplementedOrdersServer
	mu  sync.Mutex
	ran []string
}

func (s *shippedOrders) ShipOrder(_ context.Context, req *ordersv1.ShipOrderRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ran = append(s.ran, req.GetOrderId())
	return nil
}

func (s *shippedOrders) orders() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ran)
}

// TestV1ClientToThisServer sends the requests a v1 client wrote to a
// server of this runtime: it answers the unary ones with exactly the bytes
// the v1 server answered, runs each async one once, and leaves the same
// keys the v1 run left.
func TestV1ClientToThisServer(t *testing.T) {
	run := loadV1Run(t)
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	srv, err := tunnel.NewServer(rdb, withTestLease(tunnel.ServerOptions{WorkerID: "capture-server", Logger: slog.New(slog.DiscardHandler)}))
	if err != nil {
		t.Fatal(err)
	}
	greeterv1.RegisterGreeterServer(srv, greeter.Server{})
	orders := &shippedOrders{}
	ordersv1.RegisterOrdersServer(srv, orders)
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serveCtx) }()
	t.Cleanup(func() { stop(); <-served })

	// The v1 client's response stream, as it made it.
	respStream := "rpr:v1:{examples.greeter.v1.Greeter}:resp:" + run.ClientID
	if err := rdb.XGroupCreateMkStream(ctx, respStream, "client", "$").Err(); err != nil {
		t.Fatal(err)
	}
	wantAnswers := map[string][]byte{}
	for _, s := range []string{run.UnaryResponse, run.FailedResponse} {
		raw := mustHex(t, s)
		resp, err := wire.DecodeResponse(raw)
		if err != nil {
			t.Fatal(err)
		}
		wantAnswers[resp.ID] = raw
	}
	for _, s := range []string{run.UnaryRequest, run.FailedRequest} {
		// The captured deadline has passed; give the request a new one,
		// changing nothing else.
		env, err := wire.DecodeRequest(mustHex(t, s))
		if err != nil {
			t.Fatal(err)
		}
		env.Deadline = time.Now().Add(time.Minute).UnixMilli()
		raw, err := wire.EncodeRequest(env)
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "rpr:v1:{examples.greeter.v1.Greeter}:req", Values: []any{wire.Field, raw}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{run.AsyncRequest, run.AsyncKeyRequest} { // no deadline: the bytes as captured
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "rpr:v1:{examples.orders.v1.Orders}:req", Values: []any{wire.Field, mustHex(t, s)}}).Err(); err != nil {
			t.Fatal(err)
		}
	}

	var answers []redis.XMessage
	waitFor(t, "both answers", func() bool {
		answers, err = rdb.XRange(ctx, respStream, "-", "+").Result()
		return err == nil && len(answers) == 2
	})
	for _, msg := range answers {
		raw := []byte(msg.Values[wire.Field].(string))
		resp, err := wire.DecodeResponse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if want, ok := wantAnswers[resp.ID]; !ok || !bytes.Equal(raw, want) {
			t.Errorf("answer to %s:\n%x\nwant the v1 server's\n%x", resp.ID, raw, want)
		}
	}
	waitFor(t, "both async requests to run", func() bool { return len(orders.orders()) == 2 })
	if got := orders.orders(); !slices.Contains(got, "o-1") || !slices.Contains(got, "o-2") {
		t.Errorf("ShipOrder ran for %v, want o-1 and o-2 once each", got)
	}

	// The v1 client's request with a key of its own is findable by its id
	// (rpr trace): the key's state names the request, and a record under
	// the id names the key.
	keyed, err := wire.DecodeRequest(mustHex(t, run.AsyncKeyRequest))
	if err != nil {
		t.Fatal(err)
	}
	ordersTag := "rpr:v1:{examples.orders.v1.Orders}"
	waitFor(t, "the keyed request's state to name it", func() bool {
		return rdb.HGet(ctx, ordersTag+":st:"+keyed.Key, wire.StateID).Val() == keyed.ID
	})
	if f, ok := wire.ParseFinished(rdb.Get(ctx, ordersTag+":done:"+keyed.ID).Val()); !ok || f.Key != keyed.Key {
		t.Errorf("record under %s: %+v; want it to name key %s", keyed.ID, f, keyed.Key)
	}

	// The same keys as the v1 run's, and those of what v1 servers did not
	// have: each service's schema versions, the worker's stream inbox
	// (the greeter has streaming methods now), and the id alias of the
	// request with a key of its own.
	var keys []string
	newer := map[string]bool{}
	iter := rdb.Scan(ctx, 0, "rpr:*", 1000).Iterator()
	for iter.Next(ctx) {
		switch key := iter.Val(); {
		case strings.Contains(key, "}:in:"):
			newer["inbox"] = true
		case strings.HasSuffix(key, "}:schemas"):
			newer["schemas"] = true
		case key == ordersTag+":done:"+keyed.ID:
			newer["done"] = true
		default:
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	if !newer["inbox"] || !newer["schemas"] || !newer["done"] {
		t.Errorf("keys of this release missing: found %v, want a stream inbox, schema versions and an id alias", newer)
	}
	if !slices.Equal(keys, run.Keys) {
		t.Errorf("keys after the run:\n%v\nwant the v1 run's\n%v", keys, run.Keys)
	}
}

// TestThisClientToV1Server checks that a client of this runtime writes
// what a v1 server reads: the request it sends for the call the v1 client
// made is the v1 client's, byte for byte, but for the fields that differ
// from call to call (id, deadline, send time).
func TestThisClientToV1Server(t *testing.T) {
	run := loadV1Run(t)
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	// A worker record, so that the client sends although no server reads.
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, "rpr:v1:{examples.greeter.v1.Greeter}:workers", "v1-server",
		fmt.Sprintf(`{"host":"h","pid":1,"started_ms":1,"beat_ms":%d}`, now.UnixMilli())).Err(); err != nil {
		t.Fatal(err)
	}
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{ID: run.ClientID, BizCode: "CAPT", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = greeterv1.NewGreeterClient(client).SayHello(callCtx, &greeterv1.SayHelloRequest{Name: "ada"},
			tunnel.WithTimeout(time.Minute), tunnel.WithHeader("tenant", "acme"))
	}()
	var sent []redis.XMessage
	waitFor(t, "the request in its stream", func() bool {
		sent, err = rdb.XRange(ctx, "rpr:v1:{examples.greeter.v1.Greeter}:req", "-", "+").Result()
		return err == nil && len(sent) == 1
	})
	got, err := wire.DecodeRequest([]byte(sent[0].Values[wire.Field].(string)))
	if err != nil {
		t.Fatal(err)
	}
	want, err := wire.DecodeRequest(mustHex(t, run.UnaryRequest))
	if err != nil {
		t.Fatal(err)
	}
	got.ID, got.Deadline, got.Enqueued = want.ID, want.Deadline, want.Enqueued
	gotRaw, _ := wire.EncodeRequest(got)
	if wantRaw := mustHex(t, run.UnaryRequest); !bytes.Equal(gotRaw, wantRaw) {
		t.Errorf("request (id and times set to the v1 one's):\n%x\nwant the v1 client's\n%x", gotRaw, wantRaw)
	}
}
