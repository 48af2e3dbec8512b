package main

// rpr dlq: the operator's view of a service's dead-letter stream, on top of
// admin.DeadLetters, which does the work (scans, atomic replay, drop);
// these commands choose what to show and how, and guard the two commands
// that change things: replay and drop refuse to run without an explicit
// selection, drop asks before deleting, and every selection can be
// previewed with --dry-run.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

func newDlqCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, replay and drop a service's dead letters",
		Long: `dlq manages a service's dead-letter stream (rpr:v1:{pkg.Svc}:dlq, and one
per shard of a sharded service: rpr:v1:{pkg.Svc#1}:dlq, ...): the async
requests that failed their last attempt or failed permanently, and request
entries no server could decode. rpr never trims it: a dead letter stays
until it is replayed or dropped.

A dead letter is named by its entry id (the first column of "rpr dlq ls"):
its id in the stream, 1764434400123-0, prefixed with its shard for the
shards after the first of a sharded service, 2/1764434400123-0; or by its
request id. Replay queues a letter again in its shard and in the lane it
failed in (the default lane when that lane has no live server any more).

A poison message, start to finish:
  rpr dlq ls pkg.Svc                      what failed, and why
  rpr dlq show pkg.Svc 1764434400123-0    one of them, payload as JSON
  ... deploy the fix ...
  rpr dlq replay pkg.Svc --all            queue them all again
  rpr dlq drop pkg.Svc --code INVALID_ARGUMENT   give up on the rest`,
	}
	return commandGroup(cmd, "ls, show, replay or drop",
		newDlqLsCommand(), newDlqShowCommand(), newDlqReplayCommand(), newDlqDropCommand())
}

// dlqTarget is what every dlq command starts from: Redis, the admin
// handle on it, the service and its dead-letter queue.
type dlqTarget struct {
	rdb     redis.UniversalClient // closed by the command; its clock dates the letters
	a       *admin.Client
	svc     *admin.Service
	service string   // svc's name
	streams []string // the dead-letter streams, one per shard
	key     string   // the streams, as messages name them
	queue   *admin.DeadLetters
	url     string // the --redis URL, for messages
}

// checkService refuses a SERVICE argument that cannot be a service name.
func checkService(arg string) error {
	switch {
	case arg == "":
		return badInput(errors.New("name the service, e.g. rpr dlq ls examples.greeter.v1.Greeter"))
	case strings.Contains(arg, "/"):
		svc, method, _ := strings.Cut(arg, "/")
		return badInput(fmt.Errorf("%q names a method; name the service and filter by method: %s --method %s", arg, svc, method))
	case strings.ContainsAny(arg, "{} \t"):
		return badInput(fmt.Errorf("%q is not a service name; write pkg.Service, e.g. examples.greeter.v1.Greeter", arg))
	}
	return nil
}

// openDLQ connects to the --redis URL and reads which dead-letter streams
// service has. On error nothing is left open; else the caller closes
// t.rdb.
func openDLQ(ctx context.Context, rf redisFlags, service string) (*dlqTarget, error) {
	rdb, err := rf.open(ctx)
	if err != nil {
		return nil, err
	}
	a := rf.handle(rdb)
	svc := a.Service(service)
	queue := svc.DeadLetters()
	streams, err := queue.Streams(ctx)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &dlqTarget{
		rdb: rdb, a: a, svc: svc, service: service, streams: streams, key: describeStreams(streams),
		queue: queue, url: rf.url,
	}, nil
}

// describeStreams names a service's dead-letter streams in messages: the
// one of an unsharded service, or the range of a sharded one's.
func describeStreams(streams []string) string {
	switch len(streams) {
	case 0:
		return "no dead-letter stream"
	case 1:
		return streams[0]
	case 2:
		return streams[0] + " and " + streams[1]
	}
	return fmt.Sprintf("the %d streams %s … %s", len(streams), streams[0], streams[len(streams)-1])
}

// empty says that the target's dead-letter streams are empty.
func (t *dlqTarget) empty() string {
	if len(t.streams) > 1 {
		return t.key + " are empty"
	}
	return t.key + " is empty"
}

// redisNow is Redis's clock, which admin.DeadLetterFilter's ages use
// too, so that ages agree with them whatever this host's clock says.
func (t *dlqTarget) redisNow(ctx context.Context) time.Time {
	now, err := t.rdb.Time(ctx).Result()
	if err != nil {
		return time.Now()
	}
	return now
}

// notFound is the error for ids the DLQ does not have; for a service
// Redis does not know at all, the unknown-service error instead.
func (t *dlqTarget) notFound(ctx context.Context, ids []string) error {
	if names, err := t.a.Services(ctx); err == nil && !slices.Contains(names, t.service) {
		return unknownService(t.a, t.url, t.service, names)
	}
	what := "no dead letter " + ids[0]
	if len(ids) > 1 {
		what = "no dead letters " + strings.Join(ids, ", ")
	}
	return fmt.Errorf("%s in the DLQ of %s (%s): replayed or dropped already, or a mistyped id; list them with: rpr dlq ls %s", what, t.service, t.key, t.service)
}

// isEntryID reports whether id is a dead letter's entry id ("1764434400123-0"
// or, in shard 2 of a sharded service, "2/1764434400123-0").
func isEntryID(id string) bool {
	_, _, err := admin.ParseDeadLetterID(id)
	return err == nil
}

// checkID refuses an ID that is neither an entry id nor a request id.
func checkID(id string) error {
	if isEntryID(id) {
		return nil
	}
	if _, err := tunnel.ParseRequestID(id); err == nil {
		return nil
	}
	if strings.Contains(id, "/") {
		// Meant as an entry id of a shard: say what is wrong with it.
		_, _, err := admin.ParseDeadLetterID(id)
		return badInput(err)
	}
	return badInput(fmt.Errorf("%q is neither an entry id (e.g. 1764434400123-0, or 2/1764434400123-0 in shard 2 of a sharded service: the first column of \"rpr dlq ls\") nor a request id (e.g. 20261129-ORD1-1764434400123-K7P2QXM4RT)", id))
}
