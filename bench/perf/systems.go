package main

// The systems measured: an rpr server child and client instances in this
// process, and a gRPC-go server child and one client connection.

import (
	"context"
	"fmt"
	"io"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/bench/internal/compare"
)

// servers are the server children of one section, with the redis-server
// they share. close ends every one of them by its PID.
type servers struct {
	redis    *compare.RedisServer
	admin    *redis.Client
	rpr      *compare.Child
	grpc     *compare.Child
	grpcConn *grpc.ClientConn
}

// startServers starts a fresh redis-server, an rpr echo server child on
// it and, withGRPC, a gRPC echo server child and a connection to it.
func startServers(ctx context.Context, redisBin string, withGRPC bool, log io.Writer) (_ *servers, err error) {
	s := &servers{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.redis, err = compare.StartRedis(redisBin); err != nil {
		return nil, err
	}
	opts, err := redis.ParseURL(s.redis.URL())
	if err != nil {
		return nil, err
	}
	s.admin = redis.NewClient(opts)
	if s.rpr, err = compare.StartChild(ctx, "rpr "+s.redis.URL()); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "  redis-server %s on %s; rpr server child pid %d\n", s.redis.Version, s.redis.URL(), s.rpr.Pid())
	if !withGRPC {
		return s, nil
	}
	if s.grpc, err = compare.StartChild(ctx, "grpc"); err != nil {
		return nil, err
	}
	if s.grpcConn, err = grpc.NewClient(s.grpc.Addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		return nil, fmt.Errorf("gRPC client of %s: %w", s.grpc.Addr, err)
	}
	if err := s.grpcCall(ctx, 0, wrapperspb.Bytes([]byte("ready?"))); err != nil {
		return nil, fmt.Errorf("gRPC echo child does not answer: %w", err)
	}
	fmt.Fprintf(log, "  gRPC server child pid %d on %s\n", s.grpc.Pid(), s.grpc.Addr)
	return s, nil
}

func (s *servers) grpcCall(ctx context.Context, _ int, in *wrapperspb.BytesValue) error {
	return s.grpcConn.Invoke(ctx, compare.GRPCEchoMethod, in, new(wrapperspb.BytesValue))
}

// grpcSystem is the gRPC baseline: every caller on one ClientConn, as a
// gRPC-go program would call one server (HTTP/2 multiplexes the calls).
func (s *servers) grpcSystem() system {
	return system{name: "gRPC", call: s.grpcCall, child: s.grpc}
}

// rprSystem opens instances rpr client instances, each with its own
// connections, and waits until the server child answers each; the callers
// are spread over them. The caller closes the clients.
func (s *servers) rprSystem(ctx context.Context, instances int) (system, *compare.RPRClients, error) {
	c, err := compare.StartRPRClients(ctx, s.redis.URL(), instances)
	if err != nil {
		return system{}, nil, err
	}
	if err := c.WaitServed(ctx); err != nil {
		c.Close()
		return system{}, nil, err
	}
	return system{name: "rpr", call: c.Call, child: s.rpr, admin: s.admin}, c, nil
}

// close stops everything started, children by PID first, then Redis.
func (s *servers) close() {
	if s.grpcConn != nil {
		s.grpcConn.Close()
	}
	for _, c := range []*compare.Child{s.grpc, s.rpr} {
		if c != nil {
			c.Stop()
		}
	}
	if s.admin != nil {
		s.admin.Close()
	}
	if s.redis != nil {
		s.redis.Stop()
	}
}

// instancesFor is how many rpr client instances concurrency callers are
// spread over: one for a lone caller, else the -instances setting (at most
// one per caller).
func instancesFor(concurrency, instances int) int {
	return max(1, min(concurrency, instances))
}
