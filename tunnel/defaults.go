package tunnel

import "github.com/rprtunnel/rpr/internal/store"

// DefaultPrefix starts every key rpr writes. Change it (ClientOptions and
// ServerOptions.Prefix) to run several independent rpr deployments on one
// Redis.
const DefaultPrefix = store.DefaultPrefix

// DefaultLane is the name of the lane a server joins when it names none
// (ServerOptions.Lane) and calls go to when no route says otherwise. Its
// request stream has no lane suffix: rpr:v1:{S}:req.
const DefaultLane = store.DefaultLane

// laneOrDefault names a lane: "" (in options, in records that predate
// lanes) is the default lane.
func laneOrDefault(lane string) string {
	if lane == "" {
		return DefaultLane
	}
	return lane
}
