package server

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The queries a restore woke together take turns spread over 200 µs per
// query (1,000 queries: 200 ms), not all at the same instant, and every one
// within the window; a query whose caller gives up answers at once.
func TestQueryTurnsSpreadTheHerd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const herd = 1000
		start := time.Now()
		var mu sync.Mutex
		var at []time.Duration
		var wg sync.WaitGroup
		for range herd {
			wg.Go(func() {
				queryTurn(t.Context(), herd)
				mu.Lock()
				at = append(at, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		first, last, most := at[0], at[0], 0
		same := map[time.Duration]int{}
		for _, d := range at {
			first, last = min(first, d), max(last, d)
			same[d]++
			most = max(most, same[d])
		}
		if last-first < 100*time.Millisecond || most > herd/10 || last > 200*time.Millisecond {
			t.Fatalf("%d turns from %s to %s, up to %d at one instant; want them spread over 200ms", herd, first, last, most)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		before := time.Now()
		queryTurn(ctx, 20000)
		if waited := time.Since(before); waited != 0 {
			t.Fatalf("a query whose caller gave up waited %s", waited)
		}
	})
}
