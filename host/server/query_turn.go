package server

import (
	"context"
	"math/rand/v2"
	"time"
)

// The blocking queries a snapshot restore wakes together are spread over a
// window of spreadPerQuery per query woken, at most maxSpread, each taking
// a random turn in it (fsm.QueryTurn). Found by nodesim at 10,000 nodes:
// the leader's restore woke ~3,000 alloc watches and claim queries at
// once, they held both cores for 0.7 s, raft's heartbeats to the
// followers starved meanwhile, and the lease check right after the restore
// found a follower uncontacted for 628 ms: the leader stepped down and the
// restore call failed. 3,000 queries now spread over 0.6 s, a handful over
// a millisecond.
const (
	spreadPerQuery = 200 * time.Microsecond
	maxSpread      = 5 * time.Second
)

// spreadWindow is the window herd queries woken together are spread over.
func spreadWindow(herd int64) time.Duration {
	return min(maxSpread, time.Duration(max(herd, 0))*spreadPerQuery)
}

// queryTurn waits a random turn in the window of herd queries, or until
// ctx ends (the query then answers at once).
func queryTurn(ctx context.Context, herd int64) {
	w := spreadWindow(herd)
	if w <= 0 {
		return
	}
	t := time.NewTimer(rand.N(w))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
