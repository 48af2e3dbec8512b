//go:build !linux

package compare

import "os/exec"

// dieWithParent does nothing outside Linux: stop() ends the server.
func dieWithParent(*exec.Cmd) {}
