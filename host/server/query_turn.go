package server

import (
	"context"
	"time"
)

// The blocking queries a snapshot restore woke together take their turns
// one at a time, at least spreadPerQuery apart (fsm.QueryTurn), through a
// turnstile: the query holding the turn gives it on only once it has run
// again after its gap, so each turn waits for the server's scheduler as
// well as for the clock. Found by nodesim at 10,000 nodes: the leader's
// restore woke ~3,000 alloc watches and claim queries at once, they held
// both cores for 0.7 s, raft's heartbeats to the followers starved
// meanwhile, and the lease check right after the restore found a follower
// uncontacted for 628 ms: the leader stepped down and the restore call
// failed. Spreading them over a fixed window (a random timer each, 200 µs
// per query up to 5 s) was not enough: at 10,000 nodes the herd was
// ~20,000 queries, each answer makes its node ask again, and the timers
// kept firing on time whatever the turns already released cost, so the
// runnable goroutines piled up, a goroutine that slept 20 ms woke 0.4–0.7 s
// late, raft's heartbeats with it, and the leader lost its lease to both
// followers in 4 of 5 restores. A turn that waits for its holder to be
// scheduled again cannot be given faster than the server runs them.
// Measured at 10,000 nodes (nodesim -snapshot, 8.9 MiB, binaries in
// turn): random timers 1 restore in 3 failed with 503, the others took
// 5.3 and 7.9 s (raft 3.5-4.9 s, the leader missing a follower 2-3 times
// past the lease); the turnstile 1.29, 1.78 and 1.35 s (raft 0.8-1.2 s).
const spreadPerQuery = 200 * time.Microsecond

// turnstile gives the turns: tok holds the one turn.
type turnstile struct {
	tok chan struct{}
	gap time.Duration
}

func newTurnstile(gap time.Duration) *turnstile {
	t := &turnstile{tok: make(chan struct{}, 1), gap: gap}
	t.tok <- struct{}{}
	return t
}

// wait takes the turn, holds it for the gap and gives it on, or returns
// when ctx ends (the query then answers at once). herd, how many queries
// the restore woke, does not change the pace: the scheduler does.
func (t *turnstile) wait(ctx context.Context, herd int64) {
	if herd <= 0 {
		return
	}
	select {
	case <-t.tok:
	case <-ctx.Done():
		return
	}
	timer := time.NewTimer(t.gap)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
	}
	t.tok <- struct{}{}
}
