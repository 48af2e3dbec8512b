package tunnel

import (
	"encoding/json"
	"time"
)

// workerInfo is what a server publishes about each of its workers in the
// service's workers hash. BeatMillis is stamped by Redis (heartbeatScript).
type workerInfo struct {
	Host       string `json:"host"`
	PID        int    `json:"pid"`
	Started    int64  `json:"started_ms"`
	BeatMillis int64  `json:"beat_ms,omitempty"`
	// Lane is the lane the worker serves ("" in beats of workers that
	// predate lanes: the default lane).
	Lane string `json:"lane,omitempty"`
	// Shards lists the shards it reads, when the service has more than one.
	Shards []int `json:"shards,omitempty"`
}

// laneOf returns the worker's lane by name.
func (w workerInfo) laneOf() string { return laneOrDefault(w.Lane) }

const (
	// heartbeatInterval is how often a server beats and a client refreshes
	// what it knows about a service.
	heartbeatInterval = time.Second
	// liveWindow is how recent a beat must be for a worker to count as
	// live: five missed beats, so a GC pause or a slow Redis does not make
	// a healthy server look dead.
	liveWindow = 5 * time.Second
	// pruneAge is when a silent worker is removed from the hash.
	pruneAge = time.Minute
)

// countLiveWorkers counts workers whose last beat is within liveWindow of
// redisNowMillis. Entries that do not parse do not count. (CheckHealth
// applies the same rule.)
func countLiveWorkers(hash map[string]string, redisNowMillis int64) int {
	live := 0
	for _, n := range liveWorkersByLane(hash, redisNowMillis) {
		live += n
	}
	return live
}

// liveWorkersByLane counts live workers (as countLiveWorkers) per lane.
func liveWorkersByLane(hash map[string]string, redisNowMillis int64) map[string]int {
	live := map[string]int{}
	for _, raw := range hash {
		var w workerInfo
		if json.Unmarshal([]byte(raw), &w) != nil {
			continue
		}
		if redisNowMillis-w.BeatMillis <= liveWindow.Milliseconds() {
			live[w.laneOf()]++
		}
	}
	return live
}
