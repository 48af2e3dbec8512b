package compare

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseLevels reads a comma-separated list of positive numbers, such as
// the concurrency levels of a comparison ("1,16,128").
func ParseLevels(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// Millis formats a duration in milliseconds with about three significant
// digits, for the comparison tables.
func Millis(d time.Duration) string {
	v := float64(d) / 1e6
	switch {
	case v < 1:
		return strconv.FormatFloat(v, 'f', 3, 64)
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
