package server

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The queries a restore woke together take their turns one at a time, at
// least the gap apart (1,000 queries at 200 µs: 200 ms), never two at one
// instant; a query whose caller gives up answers at once.
func TestQueryTurnsOneAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const herd = 1000
		ts := newTurnstile(spreadPerQuery)
		start := time.Now()
		var mu sync.Mutex
		var at []time.Duration
		var wg sync.WaitGroup
		for range herd {
			wg.Go(func() {
				ts.wait(t.Context(), herd)
				mu.Lock()
				at = append(at, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		slices.Sort(at)
		for i := 1; i < len(at); i++ {
			if gap := at[i] - at[i-1]; gap < spreadPerQuery {
				t.Fatalf("turns %d and %d %s apart; want one at a time, %s apart", i-1, i, gap, spreadPerQuery)
			}
		}
		if want := herd * spreadPerQuery; at[herd-1] != want {
			t.Fatalf("the last of %d turns at %s; want %s", herd, at[herd-1], want)
		}

		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		before := time.Now()
		ts.wait(ctx, 20000)
		if waited := time.Since(before); waited != 0 {
			t.Fatalf("a query whose caller gave up waited %s", waited)
		}
	})
}
