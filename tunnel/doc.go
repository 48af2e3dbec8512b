// Package tunnel is the rpr runtime: gRPC-style calls between two networks
// that cannot reach each other but can both reach one Redis. Services are
// defined in .proto files; protoc-gen-rpr generates a client and a server
// API for each, built on this package.
//
// One side runs a Server with the generated Register function and Serve:
//
//	rdb, err := tunnel.Open(ctx, "redis://10.0.0.5:6379/0")
//	srv, err := tunnel.NewServer(rdb, tunnel.ServerOptions{})
//	greeterv1.RegisterGreeterServer(srv, greeterImpl{})
//	err = srv.Serve(ctx) // until ctx ends; in-flight calls are answered
//
// The other side makes calls through a Client:
//
//	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{BizCode: "ORD1"})
//	defer client.Close()
//	reply, err := greeterv1.NewGreeterClient(client).SayHello(ctx, req)
//
// A call is a request envelope added to the service's request stream in
// Redis, read by a worker of a server through a consumer group, and
// answered on a response stream only the calling Client reads. Every call
// has a deadline (the context's, else the method's (rpr.v1.method).timeout,
// else ClientOptions.DefaultTimeout), measured on Redis's clock so that
// hosts with skewed clocks agree.
//
// Errors are *Error values with gRPC's codes (Errorf, CodeOf, AsError).
// NotExecuted reports when a failed call provably never ran, so that it is
// safe to retry whatever the method does; WithRetry retries only such
// calls, or any call of a method marked idempotent.
//
// Methods marked (rpr.v1.method).async are fire-and-forget: Client.Enqueue
// (which generated code calls) returns a Receipt once the request is
// durably in Redis; servers run it, retry it under its RetryPolicy and
// dead-letter it after the last attempt.
//
// Metadata travels both ways (WithHeader, HeaderFromContext, SetHeader,
// SetTrailer); interceptors wrap calls on both sides; circuit breakers,
// rate limits, backlog caps and lanes protect both sides; OpenTelemetry
// spans and metrics are recorded through the providers in the options
// (this package uses only the OpenTelemetry API). Logs go to the
// slog.Logger of ClientOptions.Logger and ServerOptions.Logger; go-redis's
// own lines (failed dials, Sentinel and Cluster changes) join them when
// the program installs NewRedisLogger with redis.SetLogger.
//
// Whoever can write to a service's request stream can call it, unless its
// servers take only authenticated callers: a Client with
// ClientOptions.Credentials signs (and with Seal encrypts) what it
// writes, a Server with ServerOptions.Trust verifies it before anything
// runs, authorizes the method for the caller (Grant), gives the handler
// the caller's name (CallerOf) and signs its answer, which the client
// checks.
//
// A failed call's error reads "rpr: CODE: pkg.Service/Method [request id]:
// what happened", whichever side made it; Error.Message is the text alone,
// as the handler wrote it.
//
// Generated code talks to this package through a small, versioned
// contract: ClientConn (which *Client implements, so a test can pass a
// fake), ServiceInfo, ServiceDesc, MethodDesc, ServiceRegistrar and the
// SupportPackageIsVersionN constants. Operators' tools (listing services,
// queue figures, dead letters, routes, limits) are in package admin, and
// the wire format is specified in rpr's internal/wire package.
package tunnel
