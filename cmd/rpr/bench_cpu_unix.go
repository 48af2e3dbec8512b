//go:build unix

package main

import (
	"syscall"
	"time"
)

// benchProcessCPU returns the user + system CPU time this process has
// used (getrusage RUSAGE_SELF).
func benchProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
