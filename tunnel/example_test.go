package tunnel_test

import (
	"context"
	"fmt"
	"log"

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
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{App: "ORD1"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	// greeter := greeterv1.NewGreeterClient(client)
	// reply, err := greeter.SayHello(ctx, req, tunnel.WithHeader("tenant", "acme"))
}
