package fsm

import (
	"context"
	"sync/atomic"
)

// QueryTurn is waited by each blocking query a snapshot restore woke,
// before it reads the new store; herd is how many queries the restore woke
// together. A restore wakes every blocking query at once — on a server of
// 10,000 nodes thousands of alloc watches and claim queries, each reading
// the new store, answering its node, and its node asking again — and run
// all together they starve the server's raft heartbeats (host/server
// spreads them over a window that grows with herd). The state machine
// itself does not wait: the server gives the turn (SetQueryTurn).
type QueryTurn func(ctx context.Context, herd int64)

// SetQueryTurn sets the turn the blocking queries woken by a restore wait;
// nil, the default, lets them read the new store at once. Set it before
// the FSM serves queries.
func (f *FSM) SetQueryTurn(t QueryTurn) {
	f.turn.Store(&t)
}

// queryTurns is where a store finds its FSM's QueryTurn.
type queryTurns = atomic.Pointer[QueryTurn]

// waitTurn waits the store's turn for a query its abandonment woke.
func (s *StateStore) waitTurn(ctx context.Context) {
	if s.turns == nil {
		return
	}
	if t := s.turns.Load(); t != nil && *t != nil {
		(*t)(ctx, s.herd.Load())
	}
}
