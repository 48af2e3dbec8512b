package compare

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RunMain runs the body of the bench program name with a context that
// SIGINT and SIGTERM cancel, and exits 1 printing "name: err" when it
// fails: how every comparison program ends.
func RunMain(name string, body func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := body(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// UsageError prints "name: " and the message on stderr and exits 2, the
// bench programs' status for a bad flag or argument.
func UsageError(name, format string, args ...any) {
	fmt.Fprintf(os.Stderr, name+": "+format+"\n", args...)
	os.Exit(2)
}

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
