package tunnel

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/rprtunnel/rpr/internal/redistest"
)

// A client refreshes a service from its watch loop and, when it knows of
// no live worker, from the caller's goroutine (anyLiveWorker): refreshes
// run at once, and what they keep between runs must bear it (the race
// detector failed on the response stream's trim mark).
func TestConcurrentRefreshes(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	c, err := NewClient(rdb, ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	svc, err := c.service(ctx, "refreshed", 0)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := c.openResponses(ctx, svc, 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 20 {
				rs.lastRead.Store(fmt.Sprintf("%d-%d", i+1, g)) // a response read: the next refresh trims
				if err := c.refresh(ctx, svc); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got, _ := rs.trimmed.Load().(string); got == "" {
		t.Fatal("no refresh recorded a trim")
	}
}
