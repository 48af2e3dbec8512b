package tunnel

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

// heartbeat stamps this worker as live for every service in one round trip.
func (s *Server) heartbeat(ctx context.Context, services []*serverService) error {
	info, err := json.Marshal(s.workerInfo())
	if err != nil {
		return err
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(services))
	sentAt := time.Now()
	for i, svc := range services {
		cmds[i] = heartbeatScript.EvalSha(ctx, pipe, []string{s.keys.workers(svc.name)}, s.opts.WorkerID, info, pruneAge.Milliseconds())
	}
	_, _ = pipe.Exec(ctx)
	received := time.Now()
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			cmds[i] = heartbeatScript.Eval(ctx, s.rdb, []string{s.keys.workers(services[i].name)}, s.opts.WorkerID, info, pruneAge.Milliseconds())
		}
		if err := cmds[i].Err(); err != nil {
			return err
		}
	}
	redisNow, err := parseRedisTime(cmds[0].Val())
	if err != nil {
		return fmt.Errorf("heartbeat reply: %w", err)
	}
	s.clock.observe(redisNow, sentAt, received)
	return nil
}

func (s *Server) workerInfo() workerInfo {
	host, _ := os.Hostname()
	return workerInfo{Host: host, PID: os.Getpid(), Started: s.created.UnixMilli()}
}

// heartbeatLoop beats every heartbeatInterval until stop is closed.
func (s *Server) heartbeatLoop(stop <-chan struct{}, services []*serverService) {
	t := time.NewTicker(heartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		beatCtx, cancel := context.WithTimeout(context.Background(), 2*heartbeatInterval)
		if err := s.heartbeat(beatCtx, services); err != nil {
			s.log.Warn("rpr: heartbeat failed; clients may see this worker as gone", "error", err)
		}
		cancel()
	}
}

// removeHeartbeats tells clients at once that this worker is gone.
func (s *Server) removeHeartbeats(services []*serverService) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, svc := range services {
		if err := s.rdb.HDel(ctx, s.keys.workers(svc.name), s.opts.WorkerID).Err(); err != nil {
			s.log.Warn("rpr: remove heartbeat", "service", svc.name, "error", err)
		}
	}
}
