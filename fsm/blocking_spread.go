package fsm

import (
	"context"
	"math/rand/v2"
	"time"
)

// A snapshot restore wakes every blocking query at once: on a server of
// 10,000 nodes, thousands of alloc watches and claim queries, each reading
// the new store, answering its node, and its node asking again. Run all
// together they held both cores of the node simulator's machine for 0.7 s
// right after the leader's restore, and raft's heartbeats to the followers,
// starved meanwhile, missed the leader lease: the leader stepped down
// (nodesim, 10,000 nodes). So each woken query first waits a turn drawn
// from a window of spreadPerQuery per query woken with it, at most
// maxSpread: 3,000 queries spread over 0.6 s, a handful over a millisecond.
const (
	spreadPerQuery = 200 * time.Microsecond
	maxSpread      = 5 * time.Second
)

// spreadWindow is the window herd queries woken together are spread over.
func spreadWindow(herd int64) time.Duration {
	return min(maxSpread, time.Duration(max(herd, 0))*spreadPerQuery)
}

// waitTurn waits a random turn in the window of herd queries, or until ctx
// ends (the query then answers at once).
func waitTurn(ctx context.Context, herd int64) {
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
