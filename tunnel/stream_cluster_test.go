package tunnel_test

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/internal/logcapture"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/tunnel"
)

// shardedFlowDesc is the flow service under another name, sharded.
func shardedFlowDesc(name string, shards int) *tunnel.ServiceDesc {
	info := &tunnel.ServiceInfo{Name: name, Shards: shards}
	desc := &tunnel.ServiceDesc{Service: info}
	for _, m := range flowDesc.Methods {
		m.Service = info
		desc.Methods = append(desc.Methods, m)
	}
	return desc
}

// TestStreamClusterShardedKeys runs streams of every kind of a 4-shard
// service on a Redis Cluster and, while they are open, checks that every
// key of the service is in one of its shards' hash tags, and that each
// stream's keys (its state hash, the caller's response stream, the
// worker's inbox) share one tag: no script or pipeline of a stream can
// cross slots.
func TestStreamClusterShardedKeys(t *testing.T) {
	const service, shards, clientID, workerID = "test.v1.StreamSharded", 4, "sharded-client", "sharded-worker"
	cluster := redistest.StartCluster(t)
	ctx := context.Background()
	logs := &logcapture.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	desc := shardedFlowDesc(service, shards)
	release := make(chan struct{})
	impl := &flowImpl{
		down: func(_ *flowMsg, s flowDownSrv) error {
			if err := s.Send(wrapperspb.Bytes([]byte("first"))); err != nil {
				return err
			}
			select {
			case <-release:
				return nil
			case <-s.Context().Done():
				return s.Context().Err()
			}
		},
		up: func(s flowUpSrv) error {
			n := int64(0)
			for {
				if _, err := s.Recv(); isEOF(err) {
					return s.SendAndClose(wrapperspb.Int64(n))
				} else if err != nil {
					return err
				}
				n++
			}
		},
		both: func(s flowDuplexes) error {
			for {
				m, err := s.Recv()
				if isEOF(err) {
					return nil
				}
				if err != nil {
					return err
				}
				if err := s.Send(m); err != nil {
					return err
				}
			}
		},
	}
	startServer(t, mustOpen(t, ctx, cluster.URL()), tunnel.ServerOptions{WorkerID: workerID, Logger: logger}, func(s *tunnel.Server) {
		s.RegisterService(desc, impl)
	})
	client, err := tunnel.NewClient(mustOpen(t, ctx, cluster.URL()), tunnel.ClientOptions{ID: clientID, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	method := func(name string) *tunnel.MethodDesc {
		for i := range desc.Methods {
			if desc.Methods[i].Name == name {
				return &desc.Methods[i]
			}
		}
		panic(name)
	}
	open := func(name string) (*tunnel.GenericClientStream[flowMsg, flowMsg], string, error) {
		var id string
		s, err := client.NewStream(ctx, method(name), tunnel.CaptureRequestID(&id))
		if err != nil {
			return nil, "", err
		}
		return &tunnel.GenericClientStream[flowMsg, flowMsg]{ClientStream: s}, id, nil
	}
	waitFor(t, "the sharded service to take streams", func() bool { return pingBoth(client, method("Both")) })

	// 24 watch-style streams, and 4 each of the other kinds, all kept open.
	var ids []string
	var ups []*tunnel.GenericClientStream[flowMsg, flowMsg]
	var boths []*tunnel.GenericClientStream[flowMsg, flowMsg]
	for range 24 {
		s, id, err := open("Down")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(wrapperspb.Bytes(nil)); err != nil {
			t.Fatal(err)
		}
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatalf("Down %s: %v", id, err)
		}
		ids = append(ids, id)
	}
	for range 4 {
		s, id, err := open("Both")
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := s.Send(wrapperspb.Bytes([]byte("ping"))); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Recv(); err != nil {
				t.Fatalf("Both %s: %v", id, err)
			}
		}
		ids, boths = append(ids, id), append(boths, s)
		u, uid, err := open("Up")
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := u.Send(wrapperspb.Bytes([]byte("x"))); err != nil {
				t.Fatal(err)
			}
		}
		ids, ups = append(ids, uid), append(ups, u)
	}

	// Every key of the service, from every master.
	var mu sync.Mutex
	keys := map[string]bool{}
	admin := mustOpen(t, ctx, cluster.URL()).(*redis.ClusterClient)
	waitFor(t, "the open streams' state on the masters", func() bool {
		clear(keys)
		err := admin.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			iter := node.Scan(ctx, 0, "*"+service+"*", 1000).Iterator()
			for iter.Next(ctx) {
				mu.Lock()
				keys[iter.Val()] = true
				mu.Unlock()
			}
			return iter.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for k := range keys {
			if strings.Contains(k, ":st:") {
				n++
			}
		}
		return n >= len(ids)
	})
	tag := regexp.MustCompile(`^` + regexp.QuoteMeta(store.DefaultPrefix) + `\{` + regexp.QuoteMeta(service) + `(#[1-3])?\}:`)
	for k := range keys {
		if !tag.MatchString(k) {
			t.Errorf("key %q is not in one of the service's shard hash tags", k)
		}
	}
	ks := store.NewKeyspace("")
	used := map[int]int{}
	for _, id := range ids {
		shard := -1
		for k := range shards {
			if keys[ks.Shard(service, k).State(id)] {
				shard = k
			}
		}
		if shard < 0 {
			t.Errorf("stream %s has no state hash in any shard", id)
			continue
		}
		used[shard]++
		sk := ks.Shard(service, shard)
		for _, key := range []string{sk.Responses(clientID), sk.Inbox(workerID)} {
			if !keys[key] {
				t.Errorf("stream %s has its state in shard %d, but %s does not exist", id, shard, key)
			} else if redistest.Slot(key) != redistest.Slot(sk.State(id)) {
				t.Errorf("%s and %s are in different slots", key, sk.State(id))
			}
		}
	}
	t.Logf("%d open streams over the shards: %v", len(ids), used)
	if len(used) < 2 {
		t.Errorf("all %d streams went to one shard (%v): the test proves little", len(ids), used)
	}

	close(release)
	for _, s := range boths {
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); !isEOF(err) {
			t.Errorf("Both end: %v", err)
		}
	}
	for _, u := range ups {
		up := &tunnel.GenericClientStream[flowMsg, wrapperspb.Int64Value]{ClientStream: u.ClientStream}
		if n, err := up.CloseAndRecv(); err != nil || n.GetValue() != 3 {
			t.Errorf("Up end: %v, %v", n, err)
		}
	}
	for _, bad := range []string{"CROSSSLOT", "same slot", "non local key"} {
		if lines := logs.Lines(bad); len(lines) > 0 {
			t.Errorf("logs mention %q:\n%s", bad, strings.Join(lines, "\n"))
		}
	}
}
