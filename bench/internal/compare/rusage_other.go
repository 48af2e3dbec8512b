//go:build !unix

package compare

import "time"

// ProcessCPU is not measured outside Unix: -1 prints as n/a.
func ProcessCPU() time.Duration { return -1 }
