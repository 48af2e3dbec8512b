package compare

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// ClosedLoop makes n calls with concurrency callers, each making one call
// after the other; caller w (0 ≤ w < concurrency) passes w to call, so
// that callers can be spread over several client instances. When
// latencies is not nil (len ≥ n) it gets each call's duration. It returns
// how many calls failed and the first failure's error; callers stop
// early once ctx ends.
func ClosedLoop(ctx context.Context, concurrency, n int, latencies []time.Duration, call func(ctx context.Context, worker int) error) (errs int, firstErr error) {
	var next, failed atomic.Int64
	var once sync.Once
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t0 := time.Now()
				err := call(ctx, w)
				if latencies != nil {
					latencies[i] = time.Since(t0)
				}
				if err != nil {
					failed.Add(1)
					once.Do(func() { firstErr = err })
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil && firstErr == nil {
		return int(failed.Load()), err
	}
	return int(failed.Load()), firstErr
}
