package admin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestDrainRemovedLane: requests queued in a lane whose servers are gone
// are moved, on Service.Drain, to the default lane and run there exactly once.
func TestDrainRemovedLane(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	_, stopV2 := startLane(t, rdb, "v2", 0)
	stopV2() // v2's servers are gone; its queue fills up
	client := newLanesClient(t, rs.Client(t))
	table := handle(rdb).Service(lanesService).Routes()
	setRoute(t, table, lanesService+"/Job", "v2")
	job := &lanesDesc(0).Methods[1]
	const n = 300
	// The client reads the table on its first call to the service.
	for i := range n {
		if _, err := client.Enqueue(context.Background(), job, wrapperspb.String(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	var queued int64
	for _, st := range mustLanes(t, rdb) {
		if st.Lane == "v2" {
			queued = st.Queued
		}
	}
	if queued != n {
		t.Fatalf("lane v2 holds %d requests, want %d", queued, n)
	}

	if _, err := table.Remove(context.Background(), lanesService+"/Job"); err != nil {
		t.Fatal(err)
	}
	// Neither routed nor served, the lane is still listed while it holds
	// requests.
	if got := laneQueued(t, rdb, "v2"); got != n {
		t.Fatalf("Lanes lists v2 with %d requests after its route went, want %d", got, n)
	}
	res, err := handle(rdb).Service(lanesService).Drain(context.Background(), "v2", tunnel.DefaultLane)
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != n || res.Left != 0 {
		t.Fatalf("Drain = %+v, want %d moved and 0 left", res, n)
	}
	srv, _ := startLane(t, rdb, "", 0)
	waitFor(t, "drained jobs run in the default lane", func() bool { return len(srv.executed()) == n })
	time.Sleep(300 * time.Millisecond) // a duplicate would show up by now
	for v, runs := range srv.executed() {
		if runs != 1 {
			t.Errorf("job %s ran %d times", v, runs)
		}
	}
}

func TestParseRouteRule(t *testing.T) {
	good := map[string]string{
		"v2":                  "v2",
		" v1:90, v2:10 ":      "v1:90,v2:10",
		"x-canary=true => v2": "x-canary=true => v2",
		"Tenant=acme,x-beta=1 => v2:50,default:50": "tenant=acme,x-beta=1 => v2:50,default:50",
	}
	for spec, want := range good {
		r, err := admin.ParseRouteRule(spec)
		if err != nil {
			t.Errorf("ParseRouteRule(%q): %v", spec, err)
			continue
		}
		if r.String() != want {
			t.Errorf("ParseRouteRule(%q).String() = %q, want %q", spec, r.String(), want)
		}
	}
	bad := map[string]string{
		"":               "lane",
		"V2":             "lane \"V2\"",
		"v1:x":           "weight",
		"v1:0":           "add up to 0",
		"v1,v1":          "twice",
		"x-canary => v2": "key=value",
		"a/b":            "lane",
	}
	for spec, want := range bad {
		if _, err := admin.ParseRouteRule(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRouteRule(%q) = %v, want an error mentioning %q", spec, err, want)
		}
	}
	table := admin.New(nil, admin.Options{}).Service(lanesService).Routes()
	for _, pattern := range []string{"other.Svc/*", lanesService, lanesService + "/Wh*"} {
		if err := table.Set(context.Background(), pattern, []admin.RouteRule{{Lanes: []admin.LaneWeight{{Lane: "v2", Weight: 1}}}}); err == nil {
			t.Errorf("Set(%q) accepted a bad pattern", pattern)
		}
	}
}

// TestRoutesListAndTest: List orders exact methods before the wildcard
// and reports entries that do not decode; Test says where a call would go
// and with what chance.
func TestRoutesListAndTest(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	routes := handle(rdb).Service(lanesService).Routes()
	setRoute(t, routes, lanesService+"/*", "v1:3,v2:1")
	setRoute(t, routes, lanesService+"/Which", "X-Canary=true => v2")
	if err := rdb.HSet(ctx, routes.Key(), lanesService+"/Job", "not json").Err(); err != nil {
		t.Fatal(err)
	}
	list, err := routes.List(ctx)
	if len(list) != 2 || list[0].Pattern != lanesService+"/Which" || list[1].Pattern != lanesService+"/*" ||
		list[0].Rules[0].String() != "x-canary=true => v2" || err == nil || !strings.Contains(err.Error(), lanesService+"/Job") {
		t.Fatalf("List = %+v, %v; want Which before *, and the bad Job route in the error", list, err)
	}
	d, err := routes.Test(ctx, "Which", tunnel.Metadata{"X-Canary": {"true"}})
	if err != nil || d.Pattern != lanesService+"/Which" || d.RuleNumber != 1 || d.Rule == nil || d.Lanes["v2"] != 1 {
		t.Errorf("Test(canary Which) = %+v, %v; want rule 1 of Which, all to v2", d, err)
	}
	d, err = routes.Test(ctx, lanesService+"/Which", nil)
	if err != nil || d.Pattern != lanesService+"/*" || d.Lanes["v1"] != 0.75 || d.Lanes["v2"] != 0.25 {
		t.Errorf("Test(Which) = %+v, %v; want the wildcard's 75/25", d, err)
	}
	if _, err := routes.Test(ctx, "other.Svc/Which", nil); err == nil {
		t.Error("Test of another service's method: no error")
	}
	if ok, err := routes.Remove(ctx, lanesService+"/*"); err != nil || !ok {
		t.Fatalf("Remove(*) = %v, %v", ok, err)
	}
	d, err = routes.Test(ctx, "Job2", nil)
	if err != nil || d.Rule != nil || d.RuleNumber != 0 || d.Lanes[tunnel.DefaultLane] != 1 {
		t.Errorf("Test with no route = %+v, %v; want the default lane", d, err)
	}
}
