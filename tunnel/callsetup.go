package tunnel

import (
	"context"
	"fmt"
	"time"

	"github.com/rprtunnel/rpr/internal/wire"
)

// What a call settles before it is sent: its deadline, whether any
// server could answer it, and the lane and shard it goes to.

// deadline picks the deadline of a call that began at now. The timeout is
// the call option's, else
// the method's default, else the client's default; a deadline already on
// the context wins when it is earlier, and replaces the defaults (but not
// an explicit WithTimeout) when it is later.
func (c *Client) deadline(ctx context.Context, method *MethodDesc, callTimeout time.Duration, now time.Time) time.Time {
	ctxDeadline, hasDeadline := ctx.Deadline()
	if callTimeout > 0 {
		d := now.Add(callTimeout)
		if hasDeadline && ctxDeadline.Before(d) {
			return ctxDeadline
		}
		return d
	}
	if hasDeadline {
		return ctxDeadline
	}
	timeout := method.Timeout
	if timeout <= 0 {
		timeout = c.opts.DefaultTimeout
	}
	return now.Add(timeout)
}

// ctxEndsBy reports whether ctx's own deadline is deadline or earlier:
// then the call needs no context of its own to end on time (a caller's
// request-scoped context usually brings the deadline that wins).
func ctxEndsBy(ctx context.Context, deadline time.Time) bool {
	d, ok := ctx.Deadline()
	return ok && !d.After(deadline)
}

// anyLiveWorker reports whether lane of svc has a live worker. It trusts
// the cached count when that is positive; when it is zero it looks again
// before failing the call, so a server that just started is found at once.
func (c *Client) anyLiveWorker(ctx context.Context, svc *clientService, lane string) (bool, error) {
	if svc.liveWorkers(lane) > 0 {
		return true, nil
	}
	if err := c.refresh(ctx, svc); err != nil {
		return false, err
	}
	return svc.liveWorkers(lane) > 0, nil
}

// noLiveServerError explains a call that no live server could take.
func (c *Client) noLiveServerError(svc *clientService, full, rid, lane string) *Error {
	if svc.liveWorkers("") > 0 { // servers of other lanes are up
		start := fmt.Sprintf("start one with ServerOptions.Lane %q", lane)
		if lane == DefaultLane {
			start = "start one without ServerOptions.Lane"
		}
		return notExecutedf(Unavailable, "%s [%s]: no live server in lane %s of service %s (servers of other lanes are up): %s, or route the method elsewhere (`rpr routes`)", full, rid, lane, svc.name, start)
	}
	r := svc.roster.Load()
	if r == nil || r.Known == 0 {
		return notExecutedf(Unavailable, "%s [%s]: no live server for service %s (no worker heartbeat in the last %v under prefix %q): start a server, or check that it uses the same Redis and prefix", full, rid, svc.name, wire.LiveWindow, c.opts.Prefix)
	}
	// Servers were here: say how long they have been silent, so that a
	// stopped or stalled server is told apart from a wrong Redis or prefix.
	return notExecutedf(Unavailable, "%s [%s]: no live server for service %s (its last worker heartbeat came %v before this client looked, from %s; a server counts as live for %v after a beat): its servers stopped, stall, or cannot reach Redis; `rpr ls` lists them",
		full, rid, svc.name, r.Silence().Round(100*time.Millisecond), r.LatestWorker, wire.LiveWindow)
}

// route picks the lane and shard of a call: the lane from WithLane, else
// from the service's routing table; the shard from key (an async
// request's idempotency key) when there is one, else one at random.
func (c *Client) route(svc *clientService, method *MethodDesc, cfg *callConfig, key string) (lane string, shard int) {
	lane = cfg.lane
	if lane == "" {
		lane = svc.routes.lane(method.Service.Name, method.Name, cfg.header)
	}
	return lane, svc.shards.pick(key)
}

// bizCode picks the business code for a call's request id.
func (c *Client) bizCode(method *MethodDesc) string {
	switch {
	case method.Service.BizCode != "":
		return method.Service.BizCode
	case c.opts.BizCode != "":
		return c.opts.BizCode
	}
	return c.bizCodes.get(method.Service.Name, bizCodeForService)
}
