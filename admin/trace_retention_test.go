package admin_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// startLanesServer runs a server of lanesService (one shard) with opts
// until the test ends, and returns once its lane is live.
func startLanesServer(t *testing.T, rdb redis.UniversalClient, opts tunnel.ServerOptions) {
	t.Helper()
	opts.Logger = quietLogger()
	server, err := tunnel.NewServer(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	server.RegisterService(lanesDesc(1), &laneServer{lane: laneOrDefault(opts.Lane), runs: map[string]int{}})
	serve(t, server, opts.WorkerID)
	waitFor(t, opts.WorkerID+" live", func() bool {
		for _, st := range mustLanes(t, rdb) {
			if st.Lane == laneOrDefault(opts.Lane) && st.LiveWorkers > 0 {
				return true
			}
		}
		return false
	})
}

// TestTraceRetentionOfMixedServers: of a service whose servers keep
// finished unary calls for a minute in one lane and keep none in another,
// the call the first answered is traced from its record (who, when, how),
// and a trace of the other's call finds nothing and says that some of the
// service's servers keep none.
func TestTraceRetentionOfMixedServers(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	startLanesServer(t, rdb, tunnel.ServerOptions{WorkerID: "keeper", Retention: time.Minute})
	startLanesServer(t, rdb, tunnel.ServerOptions{WorkerID: "forgetter", Lane: "old"})
	client := newLanesClient(t, rs.Client(t))
	var kept, lost string
	if lane, err := which(ctx, client, 1, tunnel.WithLane(tunnel.DefaultLane), tunnel.CaptureRequestID(&kept)); err != nil || lane != tunnel.DefaultLane {
		t.Fatalf("call to the default lane: %q, %v", lane, err)
	}
	if lane, err := which(ctx, client, 1, tunnel.WithLane("old"), tunnel.CaptureRequestID(&lost)); err != nil || lane != "old" {
		t.Fatalf("call to lane old: %q, %v", lane, err)
	}

	tr, err := handle(rdb).Trace(ctx, kept)
	if err != nil {
		t.Fatal(err)
	}
	f := tr.Finished
	if tr.Service != lanesService || tr.State != "SUCCESS" || tr.ByKey || f == nil {
		t.Fatalf("trace of a kept call: %+v; want %s, SUCCESS, from its record", tr, lanesService)
	}
	if f.Method != "Which" || f.Worker != "keeper" || f.Code != tunnel.OK || f.Bytes != len("\n\x07default") ||
		f.Done.Before(f.Started) || f.Done.Before(tr.ID.Time) || f.ExpiresIn <= 0 || f.ExpiresIn > time.Minute {
		t.Errorf("record of a kept call: %+v", f)
	}
	if tr.Retention != time.Minute || !tr.RetentionPartial {
		t.Errorf("trace says the service keeps calls %v (partial %v); want 1m, and that some servers keep none", tr.Retention, tr.RetentionPartial)
	}

	tr, err = handle(rdb).Trace(ctx, lost)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Service != "" || len(tr.Searched) != 1 || tr.Searched[0].Service != lanesService ||
		tr.Searched[0].Retention != time.Minute || !tr.Searched[0].Partial {
		t.Errorf("trace of a call whose server keeps none: %+v; want nothing found, and %s searched: 1m, partial", tr, lanesService)
	}
}

// TestTraceReadsOlderAndNewerRecords: the records trace reads are a
// contract with servers of other releases. An async request with a key of
// its own finished by a server of a release before the id alias (its
// state has no id field, and there is no record under its id; its worker
// record no retention_ms) is still traced by its key, and the service
// counts as keeping no unary calls; a finished record of a later release,
// with fields this one does not know, is read for what it knows; one that
// does not parse is ignored. With no worker record left, the trace says
// what the servers kept is not known.
func TestTraceReadsOlderAndNewerRecords(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	tag := "rpr:v1:{" + lanesService + "}"
	now := time.Now().UnixMilli()
	// What the previous release's heartbeat and complete script wrote.
	rdb.HSet(ctx, tag+":workers", "old-w", `{"host":"h","pid":7,"started_ms":1,"beat_ms":`+itoa(now)+`,"methods":["Which","Job"]}`)
	rdb.HSet(ctx, tag+":st:order-7", "state", "SUCCESS", "done_ms", itoa(now), "worker", "old-w", "attempt", "1")
	rdb.PExpire(ctx, tag+":st:order-7", time.Hour)

	tr, err := handle(rdb).Trace(ctx, "order-7")
	if err != nil {
		t.Fatal(err)
	}
	if !tr.ByKey || tr.Key != "order-7" || tr.Service != lanesService || tr.State != "SUCCESS" || tr.Worker != "old-w" || !tr.ID.Time.IsZero() {
		t.Errorf("trace by key of an older server's outcome: %+v; want its SUCCESS by old-w, no request id named", tr)
	}
	unknown := "20261129-ORD1-1795995318695-X857YZJDH0"
	tr, err = handle(rdb).Trace(ctx, unknown)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Service != "" || len(tr.Searched) != 1 || tr.Searched[0].Retention != 0 || tr.Searched[0].Partial {
		t.Errorf("trace of an unknown id with an older server only: %+v; want retention off", tr)
	}

	// A later release's record: a field this one does not know.
	newer := "20261129-ORD1-1795995318695-NEWERREC01"
	rdb.Set(ctx, tag+":done:"+newer, `{"method":"Which","worker":"w9","done_ms":`+itoa(now)+`,"bytes":3,"cpu_us":12,"spans":["x"]}`, time.Minute)
	tr, err = handle(rdb).Trace(ctx, newer)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Service != lanesService || tr.State != "SUCCESS" || tr.Finished == nil || tr.Finished.Worker != "w9" || tr.Finished.Bytes != 3 {
		t.Errorf("trace of a later release's record: %+v (finished %+v)", tr, tr.Finished)
	}
	garbled := "20261129-ORD1-1795995318695-GARBXED001"
	rdb.Set(ctx, tag+":done:"+garbled, "v3\x00binary", time.Minute)
	if tr, err = handle(rdb).Trace(ctx, garbled); err != nil || tr.ByKey || tr.Service != "" {
		t.Errorf("trace of a record that does not parse: %+v, %v; want it ignored", tr, err)
	}

	// Once every server stopped (each removes its worker record), what
	// they kept is not known, and the trace says so rather than "off".
	rdb.Del(ctx, tag+":workers")
	tr, err = handle(rdb).Service(lanesService).Trace(ctx, unknown)
	if err != nil || len(tr.Searched) != 1 || !tr.Searched[0].NoWorkers || tr.Searched[0].Retention != 0 {
		t.Errorf("trace with no worker record: %+v, %v; want NoWorkers", tr, err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
