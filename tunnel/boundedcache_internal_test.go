package tunnel

import (
	"fmt"
	"sync"
	"testing"
)

// A boundedCache builds a key's value once while it has room, and once
// full builds the values of new keys on every get without keeping them,
// whatever goroutines ask at once.
func TestBoundedCacheBuildsOnceUpToItsBound(t *testing.T) {
	var c boundedCache[[2]string, string]
	var mu sync.Mutex
	builds := map[[2]string]int{}
	build := func(k [2]string) string {
		mu.Lock()
		builds[k]++
		mu.Unlock()
		return k[0] + "/" + k[1]
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range maxCacheEntries + 100 {
				k := [2]string{"svc", fmt.Sprint(i)}
				if got := c.get(k, build); got != "svc/"+k[1] {
					t.Errorf("goroutine %d: get(%v) = %q", g, k, got)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := len(*c.m.Load()); n != maxCacheEntries {
		t.Fatalf("cache holds %d entries; want its bound, %d", n, maxCacheEntries)
	}
	// Cached keys are built no more than once per goroutine that missed
	// them before the first was added; keys past the bound on every get.
	cached, over := [2]string{"svc", "0"}, [2]string{"svc", fmt.Sprint(maxCacheEntries + 50)}
	before := builds[cached]
	c.get(cached, build)
	c.get(over, build)
	if builds[cached] != before || builds[cached] > 4 || builds[over] != 5 {
		t.Fatalf("builds: cached key %d then %d (want unchanged, at most 4), key past the bound %d (want 5: once per get)", before, builds[cached], builds[over])
	}
}
