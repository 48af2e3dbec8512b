//go:build !race

package wire

// raceEnabled reports whether the race detector is on: not in this build.
const raceEnabled = false
