//go:build unix

package compare

import (
	"syscall"
	"time"
)

// ProcessCPU returns the user + system CPU time this process has used
// (getrusage RUSAGE_SELF), or -1 when it cannot be had.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
