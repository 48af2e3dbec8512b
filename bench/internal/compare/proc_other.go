//go:build !linux

package compare

import (
	"errors"
	"os/exec"
	"time"
)

// DieWithParent does nothing outside Linux: Stop ends the process.
func DieWithParent(*exec.Cmd) {}

// PidCPU needs /proc: outside Linux the CPU of other processes is not
// measured.
func PidCPU(int) (time.Duration, error) {
	return 0, errors.New("the CPU of another process is read from /proc, which only Linux has")
}
