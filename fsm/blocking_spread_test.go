package fsm_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// The blocking queries a snapshot restore wakes together read the new store
// spread over a window that grows with their number, not all at the same
// instant (a 10,000-node leader's thousands of watches re-run at once
// starved raft's heartbeats and cost it the leadership); each still answers
// from the new store, within the window's bound.
func TestRestoreSpreadsTheQueriesItWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fsm.New(testLogger(t))
		applyOK(t, f, 1, fsm.NodeRegister, registerCmd("n1", "a", pb.NodeStatus_NODE_STATUS_READY))
		snap := snapshotBytes(t, f)
		applyOK(t, f, 2, fsm.NodeRegister, registerCmd("n2", "b", pb.NodeStatus_NODE_STATUS_READY))

		const herd = 1000
		var mu sync.Mutex
		var ranAt []time.Duration
		start := time.Now()
		old := f.State()
		var dones []<-chan queryResult
		for range herd {
			first := true
			dones = append(dones, startQuery(t.Context(), old, 2, func(ws memdb.WatchSet, snap *fsm.StateSnapshot) (uint64, error) {
				if !first {
					mu.Lock()
					ranAt = append(ranAt, time.Since(start))
					mu.Unlock()
				}
				first = false
				return snap.Index(fsm.TableNodes)
			}))
		}
		synctest.Wait()
		if err := restoreBytes(f, snap); err != nil {
			t.Fatal(err)
		}
		for _, d := range dones {
			if r := <-d; r.err != nil || r.index != 1 {
				t.Fatalf("query after the restore = %d, %v; want 1 (the restored state)", r.index, r.err)
			}
		}
		first, last := ranAt[0], ranAt[0]
		same := map[time.Duration]int{}
		most := 0
		for _, at := range ranAt {
			first, last = min(first, at), max(last, at)
			same[at]++
			most = max(most, same[at])
		}
		// 1,000 queries at 200 µs each: a 200 ms window.
		if last-first < 100*time.Millisecond || most > herd/10 {
			t.Fatalf("%d queries re-ran within %s, up to %d at the same instant; want them spread over ~200ms", len(ranAt), last-first, most)
		}
		if last > 200*time.Millisecond {
			t.Fatalf("the last query re-ran %s after the restore, past its 200ms window", last)
		}
	})
}
