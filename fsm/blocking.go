package fsm

import (
	"context"

	"github.com/hashicorp/go-memdb"
)

// QueryFunc reads what a blocking query answers from a point-in-time
// snapshot, adding watches for what it read to ws, and returns the raft index
// its answer is current as of (usually the Index of the tables it read).
// It is run once per wake-up; keep its results in variables it closes over.
// A run whose answer is returned whatever its index (a query with no min
// index, the run after a restore) gets a nil ws, on which Add does nothing.
type QueryFunc func(ws memdb.WatchSet, snap *StateSnapshot) (index uint64, err error)

// BlockingQuery runs fn and returns once fn reports an index above minIndex,
// re-running it each time something fn watched changes. It returns the index
// of the last run, whose results are then the answer:
//
//   - minIndex 0 means "do not block": fn runs once.
//   - When ctx ends first (the caller's wait time is over) BlockingQuery
//     returns the last run's index and a nil error: the last results are
//     current, which is what a blocking query answers on timeout. Callers
//     that must tell cancellation apart check ctx.Err().
//   - When a snapshot restore replaces the store, fn runs once more on the
//     new store and BlockingQuery returns whatever index that gives, even one
//     below minIndex: the caller's view of history was replaced and it must
//     start over from the answer. Each query the restore woke first waits
//     the FSM's QueryTurn, so the server can spread them.
//   - An error from fn ends the query with that error.
//
// The returned index is at least 1, so a caller that passes it back as the
// next minIndex always blocks.
func (s *StateStore) BlockingQuery(ctx context.Context, minIndex uint64, fn QueryFunc) (uint64, error) {
	store := s.latest()
	for {
		abandonCh := store.AbandonCh()
		ws := memdb.NewWatchSet()
		ws.Add(abandonCh)
		index, err := fn(ws, store.Snapshot())
		index = max(index, 1)
		if err != nil || minIndex == 0 || index > minIndex {
			return index, err
		}
		store.waiting.Add(1)
		err = ws.WatchCtx(ctx)
		store.waiting.Add(-1)
		if err != nil {
			return index, nil
		}
		select {
		case <-abandonCh:
			// Every query waiting on the store woke with this one: each
			// waits the turn the server gives before it reads the new
			// store (QueryTurn).
			store.waitTurn(ctx)
			index, err := fn(nil, store.latest().Snapshot())
			return max(index, 1), err
		default:
		}
	}
}
