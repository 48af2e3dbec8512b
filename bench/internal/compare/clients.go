package compare

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

// RPRClients are client instances of the rpr echo service in this
// process, each with its own connection pool, as that many deployments of
// a caller would be.
type RPRClients struct {
	rdbs    []redis.UniversalClient
	clients []*tunnel.Client
}

// StartRPRClients opens n client instances through the Redis at redisURL.
// They make no call (an idle client is one): WaitServed makes the first.
func StartRPRClients(ctx context.Context, redisURL string, n int) (*RPRClients, error) {
	c := &RPRClients{}
	quiet := slog.New(slog.DiscardHandler)
	for i := range n {
		rdb, err := tunnel.Open(ctx, redisURL)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("client instance %d: %w", i, err)
		}
		c.rdbs = append(c.rdbs, rdb)
		cl, err := tunnel.NewClient(rdb, tunnel.ClientOptions{Logger: quiet})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("client instance %d: %w", i, err)
		}
		c.clients = append(c.clients, cl)
	}
	return c, nil
}

// Len is the number of instances.
func (c *RPRClients) Len() int { return len(c.clients) }

// Call makes one echo call of in on instance worker mod Len: callers
// 0..k-1 are spread evenly over the instances.
func (c *RPRClients) Call(ctx context.Context, worker int, in *wrapperspb.BytesValue) error {
	return c.clients[worker%len(c.clients)].Invoke(ctx, &rprEchoDesc.Methods[0], in, new(wrapperspb.BytesValue))
}

// WaitServed makes one call on every instance, retrying for at most 15s
// while the server is not there yet (UNAVAILABLE).
func (c *RPRClients) WaitServed(ctx context.Context) error {
	probe := wrapperspb.Bytes([]byte("ready?"))
	deadline := time.Now().Add(15 * time.Second)
	for i := range c.clients {
		for {
			err := c.Call(ctx, i, probe)
			if err == nil {
				break
			}
			if tunnel.CodeOf(err) != tunnel.Unavailable || time.Now().After(deadline) {
				return fmt.Errorf("rpr echo server does not answer client instance %d: %w", i, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// Close closes every instance and its connections.
func (c *RPRClients) Close() {
	for _, cl := range c.clients {
		cl.Close()
	}
	for _, rdb := range c.rdbs {
		rdb.Close()
	}
	c.clients, c.rdbs = nil, nil
}
