package admin_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/internal/logcapture"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// lettersService is a 3-shard async service whose one method fails
// permanently until fixed, so that it dead-letters into every shard.
const lettersService = "test.v1.Letters"

// lettersServer is one server of lettersService in one lane.
type lettersServer struct {
	lane  string
	fixed *atomic.Bool
	mu    sync.Mutex
	ok    map[string]int // successful runs per value
}

func (s *lettersServer) succeeded() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.ok))
	for k, v := range s.ok {
		out[k] = v
	}
	return out
}

// lettersInfo is the service, with 3 shards.
var lettersInfo = tunnel.ServiceInfo{Name: lettersService, Shards: 3}

// lettersMethod is the service's async method.
var lettersMethod = tunnel.MethodDesc{
	Service: &lettersInfo, Name: "Send", Async: true,
	Handler: func(impl any, ctx context.Context, decode func(proto.Message) error, _ tunnel.UnaryServerInterceptor) (proto.Message, error) {
		in := new(wrapperspb.StringValue)
		if err := decode(in); err != nil {
			return nil, err
		}
		s := impl.(*lettersServer)
		if !s.fixed.Load() {
			return nil, tunnel.Permanent(errors.New("mailbox full"))
		}
		s.mu.Lock()
		s.ok[in.GetValue()]++
		s.mu.Unlock()
		return nil, nil
	},
}

// startLetters serves lettersService in lane until the test ends or stop
// is called; it returns once the server's heartbeat is seen.
func startLetters(t *testing.T, rdb redis.UniversalClient, lane string, fixed *atomic.Bool) (*lettersServer, func()) {
	t.Helper()
	impl := &lettersServer{lane: laneOrDefault(lane), fixed: fixed, ok: map[string]int{}}
	server, err := tunnel.NewServer(rdb, tunnel.ServerOptions{
		Lane: lane, WorkerID: "letters-" + laneOrDefault(lane), Logger: slog.New(slog.NewTextHandler(&logcapture.Buffer{}, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	server.RegisterService(&tunnel.ServiceDesc{Service: &lettersInfo, Methods: []tunnel.MethodDesc{lettersMethod}}, impl)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve in lane %s: %v", lane, err)
			}
		})
	}
	t.Cleanup(stop)
	waitFor(t, "a live server in lane "+laneOrDefault(lane), func() bool {
		h, err := handle(rdb).Service(lettersService).Health(context.Background())
		return err == nil && h.ServingLane(lane)
	})
	return impl, stop
}

// TestShardedDeadLetters: a 3-shard service dead-letters into each shard's
// stream, from two lanes. The queue lists them all, oldest first, with ids
// unique over the shards ("k/id" beyond shard 0), gets, drops and replays
// them by those ids; a replay goes back to the letter's lane while it has
// a live server, and to the default lane once it has none.
func TestShardedDeadLetters(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	var fixed atomic.Bool
	defaultSrv, _ := startLetters(t, rdb, "", &fixed)
	v2Srv, stopV2 := startLetters(t, rdb, "v2", &fixed)
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })

	lane := map[string]string{} // value -> lane it was sent to
	for i := range 18 {
		// Keyed requests go to the shard their key hashes to: these keys
		// put letters in each shard (6, 5 and 7), every run.
		value, opts := "d"+strconv.Itoa(i), []tunnel.CallOption{tunnel.WithIdempotencyKey("letter-" + strconv.Itoa(i))}
		if i%4 == 0 {
			value, opts = "v"+strconv.Itoa(i), append(opts, tunnel.WithLane("v2"))
		}
		if _, err := client.Enqueue(ctx, &lettersMethod, wrapperspb.String(value), opts...); err != nil {
			t.Fatal(err)
		}
		lane[value] = tunnel.DefaultLane
		if i%4 == 0 {
			lane[value] = "v2"
		}
	}
	dlq := handle(rdb).Service(lettersService).DeadLetters()
	waitFor(t, "18 dead letters", func() bool { n, err := dlq.Len(ctx); return err == nil && n == 18 })

	letters, err := dlq.List(ctx, admin.DeadLetterFilter{}, 0)
	if err != nil || len(letters) != 18 {
		t.Fatalf("List: %d letters, %v; want 18", len(letters), err)
	}
	perShard := map[int]int{}
	valueOf := map[string]string{} // entry id -> value
	for i, dl := range letters {
		perShard[dl.Shard]++
		want := dl.StreamID
		if dl.Shard > 0 {
			want = strconv.Itoa(dl.Shard) + "/" + dl.StreamID
		}
		stream := fmt.Sprintf("rpr:v1:{%s#%d}:dlq", lettersService, dl.Shard)
		if dl.Shard == 0 {
			stream = "rpr:v1:{" + lettersService + "}:dlq"
		}
		if dl.EntryID != want || dl.Stream != stream {
			t.Errorf("letter in shard %d: EntryID %q, Stream %q; want %q in %s", dl.Shard, dl.EntryID, dl.Stream, want, stream)
		}
		if n := rdb.XRange(ctx, stream, dl.StreamID, dl.StreamID).Val(); len(n) != 1 {
			t.Errorf("letter %s is not entry %s of %s", dl.EntryID, dl.StreamID, stream)
		}
		in := new(wrapperspb.StringValue)
		if err := proto.Unmarshal(dl.Payload, in); err != nil {
			t.Fatal(err)
		}
		valueOf[dl.EntryID] = in.GetValue()
		if dl.Lane != lane[in.GetValue()] {
			t.Errorf("letter %s of %q: lane %q, want %q", dl.EntryID, in.GetValue(), dl.Lane, lane[in.GetValue()])
		}
		if i > 0 && dl.Failed.Before(letters[i-1].Failed) {
			t.Errorf("letter %d failed at %v, before letter %d (%v): want oldest first over the shards", i, dl.Failed, i-1, letters[i-1].Failed)
		}
	}
	if len(perShard) != 3 {
		t.Fatalf("letters per shard %v; want letters in each of the 3 shards", perShard)
	}
	if first5, err := dlq.List(ctx, admin.DeadLetterFilter{}, 5); err != nil || len(first5) != 5 || first5[4].EntryID != letters[4].EntryID {
		t.Errorf("List with limit 5: %d letters, %v; want the first 5 of the full list", len(first5), err)
	}

	// Get by "k/id", by request id; malformed and missing ids.
	var inShard2 admin.DeadLetter
	for _, dl := range letters {
		if dl.Shard == 2 {
			inShard2 = dl
		}
	}
	if !strings.HasPrefix(inShard2.EntryID, "2/") {
		t.Fatalf("a letter of shard 2 has EntryID %q; want 2/<id>", inShard2.EntryID)
	}
	for _, id := range []string{inShard2.EntryID, inShard2.RequestID} {
		if got, err := dlq.Get(ctx, id); err != nil || got.EntryID != inShard2.EntryID || got.Shard != 2 {
			t.Errorf("Get(%s) = %s (shard %d), %v; want %s", id, got.EntryID, got.Shard, err, inShard2.EntryID)
		}
	}
	for _, id := range []string{"x/1-0", "2/", "/1-0", "99/1-0", "2/abc", "-1/1-0"} {
		if _, err := dlq.Get(ctx, id); !errors.Is(err, admin.ErrBadDeadLetterID) {
			t.Errorf("Get(%q) = %v; want ErrBadDeadLetterID", id, err)
		}
	}
	if _, err := dlq.Get(ctx, "2/1-0"); !errors.Is(err, admin.ErrNoDeadLetter) {
		t.Errorf("Get(2/1-0) = %v; want ErrNoDeadLetter", err)
	}
	if tr, err := handle(rdb).Trace(ctx, inShard2.RequestID); err != nil || tr.Shard != 2 || tr.Lane != inShard2.Lane ||
		len(tr.DeadLetters) != 1 || tr.DeadLetters[0].ID != inShard2.EntryID {
		t.Errorf("Trace of a dead letter of shard 2: %+v, %v; want shard 2, lane %s, dead letter %s", tr, err, inShard2.Lane, inShard2.EntryID)
	}

	// Drop one default-lane letter of each shard; a malformed id drops nothing.
	var drop []string
	dropped := map[string]bool{}
	for shard := range 3 {
		for _, dl := range letters {
			if dl.Shard == shard && dl.Lane == tunnel.DefaultLane {
				drop = append(drop, dl.EntryID)
				dropped[dl.EntryID] = true
				break
			}
		}
	}
	if _, err := dlq.Drop(ctx, append(slices.Clone(drop), "nope/1-0"), nil); !errors.Is(err, admin.ErrBadDeadLetterID) {
		t.Fatalf("Drop with a malformed id: %v; want ErrBadDeadLetterID", err)
	}
	if n, _ := dlq.Len(ctx); n != 18 {
		t.Fatalf("a Drop refused for a malformed id dropped %d letters", 18-n)
	}
	if n, err := dlq.Drop(ctx, drop, nil); err != nil || n != 3 {
		t.Fatalf("Drop(%v) = %d, %v; want 3", drop, n, err)
	}
	for _, id := range drop {
		if _, err := dlq.Get(ctx, id); !errors.Is(err, admin.ErrNoDeadLetter) {
			t.Errorf("Get(%s) after its drop: %v", id, err)
		}
	}

	// The fix is deployed. The older half of lane v2's letters are
	// replayed while v2 has a live server: they run there.
	fixed.Store(true)
	var v2, first, rest []admin.DeadLetter
	v2Shards := map[int]bool{}
	for _, dl := range letters {
		if dl.Lane == "v2" {
			v2 = append(v2, dl)
			v2Shards[dl.Shard] = true
		}
	}
	if len(v2Shards) < 2 {
		t.Fatalf("lane v2's letters are all in one shard: %v", v2Shards)
	}
	for _, dl := range letters {
		switch {
		case dropped[dl.EntryID]:
		case dl.Lane == "v2" && len(first) < len(v2)/2:
			first = append(first, dl)
		default:
			rest = append(rest, dl)
		}
	}
	res, err := dlq.Replay(ctx, first, nil)
	if err != nil || res.Replayed != len(first) || len(res.Rerouted) != 0 {
		t.Fatalf("Replay of lane v2's letters while v2 is served: %+v, %v; want %d replayed, none rerouted", res, err, len(first))
	}
	waitFor(t, "v2 to run its replayed letters", func() bool { return len(v2Srv.succeeded()) == len(first) })

	// v2's servers are gone: its letters left go to the default lane.
	stopV2()
	rerouted := 0
	for _, dl := range rest {
		if dl.Lane == "v2" {
			rerouted++
		}
	}
	if rerouted == 0 {
		t.Fatal("no letter of lane v2 left to reroute")
	}
	var progress []int
	res, err = dlq.Replay(ctx, rest, func(done int) { progress = append(progress, done) })
	if err != nil || res.Replayed != len(rest) || res.Rerouted["v2"] != rerouted || len(res.Skipped) != 0 {
		t.Fatalf("Replay of the rest: %+v, %v; want %d replayed, %d of lane v2 rerouted", res, err, len(rest), rerouted)
	}
	if len(progress) == 0 || progress[len(progress)-1] != len(rest) {
		t.Errorf("progress %v; want it to end at %d", progress, len(rest))
	}
	waitFor(t, "the default lane to run the rest", func() bool { return len(defaultSrv.succeeded()) == len(rest) })
	if n, _ := dlq.Len(ctx); n != 0 {
		t.Errorf("%d dead letters left after replaying all", n)
	}
	ranIn := map[string]string{}
	for _, srv := range []*lettersServer{defaultSrv, v2Srv} {
		for value, runs := range srv.succeeded() {
			if runs != 1 || ranIn[value] != "" {
				t.Errorf("%s ran %d times in %s (and in %q)", value, runs, srv.lane, ranIn[value])
			}
			ranIn[value] = srv.lane
		}
	}
	for _, dl := range first {
		if v := valueOf[dl.EntryID]; ranIn[v] != "v2" {
			t.Errorf("%s (lane v2, replayed while v2 was served) ran in %q", v, ranIn[v])
		}
	}
	for _, dl := range rest {
		if v := valueOf[dl.EntryID]; ranIn[v] != tunnel.DefaultLane {
			t.Errorf("%s (lane %s, replayed after v2 was gone) ran in %q", v, dl.Lane, ranIn[v])
		}
	}
}

// TestParseDeadLetterID: the two forms of a dead letter id, and the
// malformed ones.
func TestParseDeadLetterID(t *testing.T) {
	for id, want := range map[string]struct {
		shard  int
		stream string
	}{
		"1764434400123-0":   {0, "1764434400123-0"},
		"1764434400123":     {0, "1764434400123"},
		"2/1764434400123-7": {2, "1764434400123-7"},
		"0/1764434400123-0": {0, "1764434400123-0"},
		"63/1-1":            {63, "1-1"},
	} {
		shard, stream, err := admin.ParseDeadLetterID(id)
		if err != nil || shard != want.shard || stream != want.stream {
			t.Errorf("ParseDeadLetterID(%q) = %d, %q, %v; want %d, %q", id, shard, stream, err, want.shard, want.stream)
		}
	}
	for _, id := range []string{"", "x", "1-x", "1-0-0", "/1-0", "2/", "a/1-0", "64/1-0", "02/1-0", "+2/1-0", "2/3/1-0", "20261129-ORD1-1764434400123-K7P2QX"} {
		if _, _, err := admin.ParseDeadLetterID(id); !errors.Is(err, admin.ErrBadDeadLetterID) || !strings.Contains(err.Error(), "2/1764434400123-0") {
			t.Errorf("ParseDeadLetterID(%q) = %v; want ErrBadDeadLetterID showing both forms", id, err)
		}
	}
}
