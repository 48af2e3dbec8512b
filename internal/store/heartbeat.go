package store

import (
	"fmt"
	"strconv"
	"time"
)

// heartbeatScript records that a worker is alive, stamped with Redis's own
// clock so that liveness never depends on the hosts' clocks, and forgets
// workers silent for longer than the prune age.
//
//	KEYS[1] workers hash
//	ARGV[1] worker id           ARGV[2] worker record (JSON object)
//	ARGV[3] prune age in ms
//
// Returns Redis's TIME reply {seconds, microseconds}.
var heartbeatScript = newScript("heartbeat", `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local info = cjson.decode(ARGV[2])
info['beat_ms'] = now
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(info))
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local beat = beat_ms(all[i + 1])
  if not beat or now - beat > tonumber(ARGV[3]) then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
return t
`)

// Heartbeat stamps a worker's record in one workers hash with Redis's
// time, and forgets the workers of the hash silent for long.
type Heartbeat struct {
	Call
}

// NewHeartbeat beats worker, whose record (wire.Worker as JSON, without
// its beat time) is record, into workers, forgetting workers silent for
// longer than prune.
func NewHeartbeat(workers, worker string, record []byte, prune time.Duration) *Heartbeat {
	return &Heartbeat{Call: Call{script: heartbeatScript, keys: []string{workers},
		args: []any{worker, record, prune.Milliseconds()}}}
}

// Result returns Redis's time at the beat.
func (h *Heartbeat) Result() (time.Time, error) {
	reply, err := h.reply()
	if err != nil {
		return time.Time{}, err
	}
	return ParseTime(reply)
}

// ParseTime reads Redis's TIME reply, {seconds, microseconds}, as a script
// returns it.
func ParseTime(v any) (time.Time, error) {
	parts, ok := v.([]any)
	if !ok || len(parts) != 2 {
		return time.Time{}, fmt.Errorf("not a TIME reply: %v", v)
	}
	var n [2]int64
	for i, p := range parts {
		var err error
		switch p := p.(type) {
		case string:
			n[i], err = strconv.ParseInt(p, 10, 64)
		case int64:
			n[i] = p
		default:
			err = fmt.Errorf("%T", p)
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("not a TIME reply: %v", v)
		}
	}
	return time.Unix(n[0], n[1]*1000), nil
}
