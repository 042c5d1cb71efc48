package fsm_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// Every blocking query a snapshot restore wakes waits the FSM's QueryTurn,
// told how many queries the restore woke together, before it reads the new
// store (the server spreads them; all at once, a 10,000-node leader's
// watches starved raft's heartbeats and cost it the leadership).
func TestRestoreWokenQueriesWaitTheirTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fsm.New(testLogger(t))
		applyOK(t, f, 1, fsm.NodeRegister, registerCmd("n1", "a", pb.NodeStatus_NODE_STATUS_READY))
		snap := snapshotBytes(t, f)
		applyOK(t, f, 2, fsm.NodeRegister, registerCmd("n2", "b", pb.NodeStatus_NODE_STATUS_READY))

		const herd = 50
		var mu sync.Mutex
		var herds []int64
		release := make(chan struct{})
		f.SetQueryTurn(func(ctx context.Context, n int64) {
			mu.Lock()
			herds = append(herds, n)
			mu.Unlock()
			<-release
		})
		var reran atomic.Int32
		old := f.State()
		var dones []<-chan queryResult
		for range herd {
			runs := 0
			dones = append(dones, startQuery(t.Context(), old, 2, func(ws memdb.WatchSet, snap *fsm.StateSnapshot) (uint64, error) {
				if runs++; runs > 1 {
					reran.Add(1)
				}
				return snap.Index(fsm.TableNodes)
			}))
		}
		synctest.Wait()
		if err := restoreBytes(f, snap); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		// Every woken query is at its turn, none has read the new store.
		mu.Lock()
		got := len(herds)
		mu.Unlock()
		if got != herd || reran.Load() != 0 {
			t.Fatalf("%d queries waiting their turn and %d re-ran before it; want %d and 0", got, reran.Load(), herd)
		}
		for _, n := range herds {
			if n != herd {
				t.Fatalf("a query was told a herd of %d, want %d", n, herd)
			}
		}
		close(release)
		for _, d := range dones {
			if r := <-d; r.err != nil || r.index != 1 {
				t.Fatalf("query after the restore = %d, %v; want 1 (the restored state)", r.index, r.err)
			}
		}
	})
}
