//go:build !unix

package main

import "time"

// benchProcessCPU returns 0 where getrusage does not exist: rpr bench then
// reports the process's CPU per call as 0 (not measured).
func benchProcessCPU() time.Duration { return 0 }
