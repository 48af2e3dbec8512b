package tunnel

import (
	"context"
	"encoding/json"
	"os"
	"time"

	"github.com/rprtunnel/rpr/internal/store"
	"github.com/rprtunnel/rpr/internal/wire"
)

// heartbeat stamps this worker as live, in one round trip: in each
// service's workers hash (shard 0's, which clients and `rpr ls` read) and
// in that of every other shard it reads (where beginScript looks a
// request's previous worker up). The beat of each service's shard 0 also
// reads the service's recorded shard count, which follow, when not nil,
// is told once the beats are judged.
func (s *Server) heartbeat(ctx context.Context, services []*serverService, queues []*queue, follow func(svc *serverService, shards int)) error {
	shardsOf := map[string][]int{}
	for _, q := range queues {
		shardsOf[q.name] = append(shardsOf[q.name], q.shard)
	}
	type beat struct {
		svc     *serverService
		key     string
		info    []byte
		schemas string // the service's schemas hash, on its shard 0 beat
	}
	var beats []beat
	for _, svc := range services {
		info := s.workerRecord()
		info.Methods, info.Schema = svc.methodNames, svc.schemaID
		if shards := shardsOf[svc.name]; len(shards) > 1 || (len(shards) == 1 && shards[0] != 0) {
			info.Shards = shards
		}
		raw, err := json.Marshal(info)
		if err != nil {
			return err
		}
		beats = append(beats, beat{svc, s.keys.Workers(svc.name), raw, s.keys.Schemas(svc.name)})
		for _, shard := range shardsOf[svc.name] {
			if shard != 0 {
				beats = append(beats, beat{svc, s.keys.Shard(svc.name, shard).Workers(), raw, ""})
			}
		}
	}
	pipe := s.rdb.Pipeline()
	calls := make([]*store.Heartbeat, len(beats))
	sentAt := time.Now()
	for i, b := range beats {
		shardCount, schema := "", ""
		if b.schemas != "" { // the service's shard 0 beat
			shardCount, schema = s.keys.ShardCount(b.svc.name), b.svc.schemaID
		}
		calls[i] = store.NewHeartbeat(b.key, s.opts.WorkerID, b.info, wire.PruneAge, wire.Retention, shardCount, b.schemas, schema)
		calls[i].Use(s.dialect)
		calls[i].Queue(ctx, pipe)
	}
	_, _ = pipe.Exec(ctx)
	received := time.Now()
	var redisNow time.Time
	var lost []*serverService
	type recorded struct {
		svc    *serverService
		shards int
	}
	var counts []recorded // each service's shard count as recorded
	for i, call := range calls {
		call.Recover(ctx, s.rdb)
		beat, err := call.Result()
		if err != nil {
			return err
		}
		if i == 0 {
			redisNow = beat.At
		}
		if beat.SchemaMissing {
			lost = append(lost, beats[i].svc)
		}
		if beats[i].schemas != "" {
			// The service's shard 0 hash, which every worker of it beats
			// into: the async fast path is safe while all of them know it.
			beats[i].svc.asyncFastPath.Store(beat.AllFastPath)
			counts = append(counts, recorded{beats[i].svc, store.ParseShardCount(beat.ShardCount, nil)})
		}
	}
	s.clock.observe(redisNow, sentAt, received)
	if len(lost) > 0 {
		s.log.Info("rpr: the service's schema is gone from Redis (restarted without persistence?); publishing it again", "services", len(lost))
		s.publishSchemas(ctx, lost)
	}
	if follow != nil {
		for _, c := range counts {
			follow(c.svc, c.shards)
		}
	}
	return nil
}

func (s *Server) workerRecord() wire.Worker {
	host, _ := os.Hostname()
	return wire.Worker{Host: host, PID: os.Getpid(), Started: s.created.UnixMilli(), Lane: s.opts.Lane, RetentionMs: s.opts.Retention.Milliseconds(),
		MaxDeadLetters: s.deadLetterCap(), AsyncFastPath: true}
}

// heartbeatLoop beats every wire.BeatInterval until stop is closed,
// telling follow the shard counts each beat read.
func (s *Server) heartbeatLoop(stop <-chan struct{}, services []*serverService, queues *queueSet, follow func(svc *serverService, shards int)) {
	t := time.NewTicker(wire.BeatInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		beatCtx, cancel := context.WithTimeout(context.Background(), 2*wire.BeatInterval)
		if err := s.heartbeat(beatCtx, services, queues.list(), follow); err != nil {
			s.log.Warn("rpr: heartbeat failed; clients may see this worker as gone", "error", err)
		}
		cancel()
	}
}

// removeHeartbeats tells clients at once that this worker is gone.
func (s *Server) removeHeartbeats(services []*serverService, queues []*queue) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pipe := s.rdb.Pipeline()
	for _, svc := range services {
		pipe.HDel(ctx, s.keys.Workers(svc.name), s.opts.WorkerID)
	}
	for _, q := range queues {
		if q.shard != 0 {
			pipe.HDel(ctx, q.keys.Workers(), s.opts.WorkerID)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		s.log.Warn("rpr: remove heartbeats", "error", err)
	}
}
