package main

// rpr bench METHOD: load any unary or async method of servers already
// running, with a JSON request, through the schema they published (the
// dynamic messages rpr call uses).

import (
	"context"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rprtunnel/rpr/tunnel"
)

// validateTarget checks the flags of a run that loads o.target: flags that
// shape the examples do not apply, and the servers must already run
// against a Redis named by --redis (or $RPR_REDIS_URL).
func (o *benchOptions) validateTarget(changed func(flag string) bool) error {
	bad := func(format string, args ...any) error {
		return badInput(fmt.Errorf(format, args...))
	}
	switch {
	case changed("mode"):
		return bad("--mode picks an example; a METHOD is called or enqueued as its schema says: drop --mode, e.g. rpr bench %s -d '{}'", o.target)
	case changed("payload"):
		return bad("--payload sizes the examples' requests; give a METHOD's request with -d, e.g. rpr bench %s -d '{\"name\": \"Ada\"}'", o.target)
	case changed("server-concurrency"):
		return bad("--server-concurrency sets the in-process example server; a METHOD is loaded on the servers already running: drop it")
	case o.redisURL == "":
		return bad("a METHOD is loaded on the servers already running against a Redis: name it, e.g. rpr bench --redis redis://10.0.0.5:6379/0 %s (or set $%s)", o.target, envRedisURL)
	}
	o.noServer = true
	return nil
}

// loadTarget makes r's calls those of o.target, read from the schema its
// servers published, with the request -d gives (read from in for -).
func (r *benchRun) loadTarget(ctx context.Context, in io.Reader, client *tunnel.Client) error {
	rf := redisFlags{url: r.o.redisURL, prefix: r.o.prefix}
	target, err := loadTarget(ctx, rf.handle(r.probe), rf.url, r.o.target)
	if err != nil {
		return err
	}
	if target.method == nil {
		return badInput(fmt.Errorf("name a method to load, as %s/Method; %s has: %s",
			target.service.FullName(), target.service.FullName(), strings.Join(methodNames(target.service), ", ")))
	}
	method, err := tunnel.MethodDescFor(target.method)
	if err != nil {
		return badInput(err)
	}
	if method.IsStreaming() {
		return badInput(fmt.Errorf("%s is a streaming method; rpr bench loads unary and async methods", method.FullMethod()))
	}
	req, err := readRequest(in, r.o.data, target)
	if err != nil {
		return badInput(err)
	}
	r.service, r.method = string(target.service.FullName()), method.FullMethod()
	r.o.payload = proto.Size(req)
	r.o.mode = "unary"
	if method.Async {
		r.o.mode = "async"
	}
	r.newCall = func() func(context.Context) error {
		// Each caller its own messages: nothing is shared while calls run.
		req := proto.Clone(req)
		if method.Async {
			return func(ctx context.Context) error {
				_, err := client.Enqueue(ctx, method, req)
				return err
			}
		}
		reply := dynamicpb.NewMessage(target.method.Output())
		return func(ctx context.Context) error {
			return client.Invoke(ctx, method, req, reply)
		}
	}
	return nil
}
