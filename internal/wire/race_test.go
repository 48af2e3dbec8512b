//go:build race

package wire

// raceEnabled reports whether the race detector is on: it is in this
// build, and sync.Pool then drops some of what it is given, so a pooled
// path may allocate.
const raceEnabled = true
