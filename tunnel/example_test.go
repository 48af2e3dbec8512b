package tunnel_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rprtunnel/rpr/tunnel"
)

// A request id names the day, the business, the moment and a random part;
// ParseRequestID takes one apart, e.g. to find when a call in a log was made.
func ExampleParseRequestID() {
	id, err := tunnel.ParseRequestID("20261129-ORD1-1795995318695-X857YZJDH0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(id.Biz, id.Time.Format("2006-01-02 15:04:05.000 MST"), id.Random)
	// Output: ORD1 2026-11-29 23:35:18.695 UTC X857YZJDH0
}

// Handlers choose the code the caller sees with Errorf; callers branch on
// CodeOf.
func ExampleErrorf() {
	err := fmt.Errorf("lookup: %w", tunnel.Errorf(tunnel.NotFound, "order %q not found", "42"))
	fmt.Println(tunnel.CodeOf(err))
	fmt.Println(err)
	// Output:
	// NOT_FOUND
	// lookup: rpr: NOT_FOUND: order "42" not found
}

// A client process opens Redis once and shares one Client between all
// generated service clients.
func ExampleNewClient() {
	ctx := context.Background()
	rdb, err := tunnel.Open(ctx, "redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{BizCode: "ORD1"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	// greeter := greeterv1.NewGreeterClient(client)
	// reply, err := greeter.SayHello(ctx, req, tunnel.WithHeader("tenant", "acme"))
}

// A handler of an async method tells rpr whether a failure is worth
// retrying: a plain error is retried with backoff, Permanent goes straight
// to the dead-letter stream.
func ExamplePermanent() {
	ship := func(quantity int) error {
		if quantity <= 0 {
			return tunnel.Permanent(tunnel.Errorf(tunnel.InvalidArgument, "quantity %d must be positive", quantity))
		}
		return tunnel.Errorf(tunnel.Unavailable, "the label printer is jammed")
	}
	for _, q := range []int{0, 1} {
		err := ship(q)
		fmt.Printf("quantity %d: %v (retried: %t)\n", q, tunnel.CodeOf(err), !tunnel.IsPermanent(err))
	}
	// Output:
	// quantity 0: INVALID_ARGUMENT (retried: false)
	// quantity 1: UNAVAILABLE (retried: true)
}

// A caller reads the retry-after hint of a call refused because the
// service's queue is full.
func ExampleRetryAfter() {
	refused := func() error { // what Enqueue returns when the buffer is full
		e, _ := tunnel.Errorf(tunnel.ResourceExhausted, "queue full").WithDetails(
			&errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Second)})
		return e
	}
	if after, ok := tunnel.RetryAfter(refused()); ok {
		fmt.Println("retry after", after)
	}
	// Output: retry after 2s
}

// RedactURL hides a Redis password before a URL is logged or shown.
func ExampleRedactURL() {
	fmt.Println(tunnel.RedactURL("rediss://app:s3cret@10.0.0.5:6380/0"))
	// Output: rediss://app:****@10.0.0.5:6380/0
}

// A Receipt prints as what an operator needs to find the request later
// (rpr trace takes the id or the key).
func ExampleReceipt_String() {
	r := tunnel.Receipt{
		RequestID:      "20261201-ORD1-1796126901737-S7DP6569AF",
		IdempotencyKey: "order-42",
		ProcessAt:      time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC),
	}
	fmt.Println(r)
	// Output: request 20261201-ORD1-1796126901737-S7DP6569AF (idempotency key order-42), due 2026-12-01T12:00:00.000Z
}
