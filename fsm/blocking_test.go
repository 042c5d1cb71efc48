package fsm_test

import (
	"context"
	"errors"
	"maps"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// queryResult is what a BlockingQuery goroutine reports.
type queryResult struct {
	index uint64
	err   error
}

// nodesQuery watches the nodes table and counts its runs.
type nodesQuery struct {
	runs  atomic.Int32
	nodes atomic.Pointer[[]*pb.Node]
}

func (q *nodesQuery) run(ws memdb.WatchSet, snap *fsm.StateSnapshot) (uint64, error) {
	q.runs.Add(1)
	nodes, err := snap.Nodes(ws)
	if err != nil {
		return 0, err
	}
	q.nodes.Store(&nodes)
	return snap.Index(fsm.TableNodes)
}

func (q *nodesQuery) ids() []string {
	var ids []string
	for _, n := range *q.nodes.Load() {
		ids = append(ids, n.GetId())
	}
	return ids
}

func startQuery(ctx context.Context, st *fsm.StateStore, minIndex uint64, fn fsm.QueryFunc) <-chan queryResult {
	done := make(chan queryResult, 1)
	go func() {
		index, err := st.BlockingQuery(ctx, minIndex, fn)
		done <- queryResult{index, err}
	}()
	return done
}

func TestBlockingQueryWakesOnlyForItsTable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fsm.New(testLogger(t))
		applyOK(t, f, 1, fsm.NodeRegister, registerCmd("n1", "a", pb.NodeStatus_NODE_STATUS_READY))

		var q nodesQuery
		done := startQuery(t.Context(), f.State(), 1, q.run)
		synctest.Wait()
		if got := q.runs.Load(); got != 1 {
			t.Fatalf("query ran %d times before any change, want 1", got)
		}

		// A change to another table, and a node status update that changes
		// nothing, must not wake the query.
		applyOK(t, f, 2, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1"}})
		applyOK(t, f, 3, fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n1", Status: pb.NodeStatus_NODE_STATUS_READY, UpdatedAt: 5})
		synctest.Wait()
		if got := q.runs.Load(); got != 1 {
			t.Fatalf("query ran %d times after unrelated changes, want 1 (spurious wake-up)", got)
		}
		select {
		case r := <-done:
			t.Fatalf("query returned %+v before its table changed", r)
		default:
		}

		applyOK(t, f, 4, fsm.NodeRegister, registerCmd("n2", "b", pb.NodeStatus_NODE_STATUS_READY))
		r := <-done
		if r.err != nil || r.index != 4 {
			t.Fatalf("BlockingQuery = %d, %v; want 4, nil", r.index, r.err)
		}
		if got := q.runs.Load(); got != 2 {
			t.Errorf("query ran %d times, want 2", got)
		}
		if ids := q.ids(); len(ids) != 2 || ids[0] != "n1" || ids[1] != "n2" {
			t.Errorf("query saw nodes %v, want [n1 n2]", ids)
		}
	})
}

func TestBlockingQueryReturnsAtDeadlineWithCurrentAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fsm.New(testLogger(t))
		applyOK(t, f, 7, fsm.NodeRegister, registerCmd("n1", "a", pb.NodeStatus_NODE_STATUS_READY))
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		var q nodesQuery
		index, err := f.State().BlockingQuery(ctx, 7, q.run)
		if err != nil || index != 7 {
			t.Fatalf("BlockingQuery = %d, %v; want 7, nil at the deadline", index, err)
		}
		// In the synctest bubble time moves only when every goroutine
		// waits, so the query returned exactly when its deadline passed.
		if ctx.Err() != context.DeadlineExceeded {
			t.Errorf("returned before the 5m wait ended (ctx: %v)", ctx.Err())
		}
		if ids := q.ids(); len(ids) != 1 || ids[0] != "n1" {
			t.Errorf("query saw %v, want [n1]", ids)
		}
	})
}

func TestBlockingQueryWakesOnRestore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fsm.New(testLogger(t))
		applyOK(t, f, 1, fsm.NodeRegister, registerCmd("n1", "a", pb.NodeStatus_NODE_STATUS_READY))
		applyOK(t, f, 2, fsm.NodeRegister, registerCmd("n2", "b", pb.NodeStatus_NODE_STATUS_READY))
		snap := snapshotBytes(t, f)
		applyOK(t, f, 3, fsm.NodeRegister, registerCmd("n3", "c", pb.NodeStatus_NODE_STATUS_READY))

		old := f.State()
		var q nodesQuery
		done := startQuery(t.Context(), old, 3, q.run)
		synctest.Wait()

		// A refused restore replaces nothing and wakes no one.
		if err := restoreBytes(f, []byte("not a snapshot")); !errors.Is(err, fsm.ErrSnapshotCorrupt) {
			t.Fatalf("Restore(garbage) = %v, want ErrSnapshotCorrupt", err)
		}
		synctest.Wait()
		if q.runs.Load() != 1 || f.State() != old {
			t.Fatalf("failed restore woke the query (%d runs) or replaced the store", q.runs.Load())
		}
		select {
		case <-old.AbandonCh():
			t.Fatal("failed restore closed AbandonCh")
		default:
		}

		if err := restoreBytes(f, snap); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		r := <-done
		// The restored state is older than the query's minIndex; the query
		// still returns so the caller starts over from the new history.
		if r.err != nil || r.index != 2 {
			t.Fatalf("BlockingQuery after restore = %d, %v; want 2, nil", r.index, r.err)
		}
		if ids := q.ids(); len(ids) != 2 || ids[0] != "n1" || ids[1] != "n2" {
			t.Errorf("after restore the query saw %v, want [n1 n2]", ids)
		}
		select {
		case <-old.AbandonCh():
		default:
			t.Fatal("old store's AbandonCh still open after restore")
		}
		if f.State() == old {
			t.Fatal("State() still returns the replaced store")
		}

		// A query started on the abandoned store follows to the new one and
		// blocks there, waking for a change to the new store.
		done = startQuery(t.Context(), old, 2, q.run)
		synctest.Wait()
		applyOK(t, f, 4, fsm.NodeDeregister, &pb.NodeDeregisterCommand{NodeId: "n1"})
		r = <-done
		if r.err != nil || r.index != 4 {
			t.Fatalf("query on abandoned store = %d, %v; want 4, nil from the new store", r.index, r.err)
		}
		if ids := q.ids(); len(ids) != 1 || ids[0] != "n2" {
			t.Errorf("query saw %v, want [n2]", ids)
		}
	})
}

func TestBlockingQueryNonBlockingCases(t *testing.T) {
	f := fsm.New(testLogger(t))
	var q nodesQuery

	// minIndex 0 runs once without blocking, and an empty table reports 1 so
	// the caller's next query blocks.
	index, err := f.State().BlockingQuery(t.Context(), 0, q.run)
	if err != nil || index != 1 || q.runs.Load() != 1 {
		t.Fatalf("BlockingQuery(min 0) = %d, %v after %d runs; want 1, nil after 1", index, err, q.runs.Load())
	}

	// An index already past minIndex returns at once.
	applyOK(t, f, 9, fsm.NodeRegister, registerCmd("n1", "a", pb.NodeStatus_NODE_STATUS_READY))
	if index, err := f.State().BlockingQuery(t.Context(), 5, q.run); err != nil || index != 9 {
		t.Fatalf("BlockingQuery(min 5) = %d, %v; want 9, nil", index, err)
	}

	// An error from the query ends it.
	boom := errors.New("boom")
	_, err = f.State().BlockingQuery(t.Context(), 100, func(memdb.WatchSet, *fsm.StateSnapshot) (uint64, error) {
		return 0, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("BlockingQuery error = %v, want boom", err)
	}
}

// TestReturnedObjectsAreNotMutated checks that an update replaces a stored
// node rather than changing the object an earlier reader holds, and that a
// StateSnapshot keeps seeing the state it was taken at.
func TestReturnedObjectsAreNotMutated(t *testing.T) {
	f := fsm.New(testLogger(t))
	applyOK(t, f, 1, fsm.NodeRegister, registerCmd("n1", "a", pb.NodeStatus_NODE_STATUS_READY))
	before, err := f.State().NodeByID(nil, "n1")
	if err != nil || before == nil {
		t.Fatalf("NodeByID = %v, %v", before, err)
	}
	snap := f.State().Snapshot()

	applyOK(t, f, 2, fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n1", Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: 9})

	if before.GetStatus() != pb.NodeStatus_NODE_STATUS_READY || before.GetModifyIndex() != 1 || before.GetStatusUpdatedAt() != 0 {
		t.Errorf("object handed out before the update was mutated: %v", before)
	}
	after, _ := f.State().NodeByID(nil, "n1")
	if after == before || after.GetStatus() != pb.NodeStatus_NODE_STATUS_DOWN || after.GetModifyIndex() != 2 {
		t.Errorf("NodeByID after update = %v, want a new object, down at modify index 2", after)
	}
	if old, _ := snap.NodeByID(nil, "n1"); old != before {
		t.Errorf("snapshot taken before the update sees %v, want the original object", old)
	}
	if idx, _ := snap.Index(fsm.TableNodes); idx != 1 {
		t.Errorf("snapshot nodes index = %d, want 1", idx)
	}
}

func TestNodeReads(t *testing.T) {
	f := fsm.New(testLogger(t))
	counts, err := f.State().NodeCountsByStatus()
	if err != nil {
		t.Fatal(err)
	}
	want := map[pb.NodeStatus]int{pb.NodeStatus_NODE_STATUS_READY: 0, pb.NodeStatus_NODE_STATUS_DOWN: 0}
	if !maps.Equal(counts, want) {
		t.Errorf("empty store counts = %v, want %v", counts, want)
	}

	applyOK(t, f, 1, fsm.NodeRegister, registerCmd("n3", "c", pb.NodeStatus_NODE_STATUS_READY))
	applyOK(t, f, 2, fsm.NodeRegister, registerCmd("n1", "a", pb.NodeStatus_NODE_STATUS_DOWN))
	applyOK(t, f, 3, fsm.NodeRegister, registerCmd("n10", "b", pb.NodeStatus_NODE_STATUS_READY))
	counts, err = f.State().NodeCountsByStatus()
	if err != nil {
		t.Fatal(err)
	}
	want = map[pb.NodeStatus]int{pb.NodeStatus_NODE_STATUS_READY: 2, pb.NodeStatus_NODE_STATUS_DOWN: 1}
	if !maps.Equal(counts, want) {
		t.Errorf("counts = %v, want %v", counts, want)
	}

	nodes, err := f.State().Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.GetId())
	}
	if len(ids) != 3 || ids[0] != "n1" || ids[1] != "n10" || ids[2] != "n3" {
		t.Errorf("Nodes order = %v, want [n1 n10 n3] (sorted by ID)", ids)
	}
	if n, err := f.State().NodeByID(nil, "missing"); n != nil || err != nil {
		t.Errorf("NodeByID(missing) = %v, %v; want nil, nil", n, err)
	}
	if latest, err := f.State().LatestIndex(); err != nil || latest != 3 {
		t.Errorf("LatestIndex = %d, %v; want 3", latest, err)
	}
	if _, err := f.State().Index("jobz"); !errors.Is(err, fsm.ErrUnknownTable) {
		t.Errorf("Index(jobz) error = %v, want ErrUnknownTable", err)
	}
}

func TestServerReads(t *testing.T) {
	f := fsm.New(testLogger(t))
	applyOK(t, f, 1, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s2", RaftAddr: "127.0.0.2:4648"}})
	applyOK(t, f, 2, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1", RaftAddr: "127.0.0.1:4648"}})
	s, err := f.State().ServerByID(nil, "s2")
	if err != nil || s.GetRaftAddr() != "127.0.0.2:4648" || s.GetCreateIndex() != 1 {
		t.Fatalf("ServerByID(s2) = %v, %v", s, err)
	}
	servers, err := f.State().Servers(nil)
	if err != nil || len(servers) != 2 || servers[0].GetId() != "s1" || servers[1].GetId() != "s2" {
		t.Fatalf("Servers = %v, %v; want s1, s2", servers, err)
	}
	if s, err := f.State().ServerByID(nil, "s3"); s != nil || err != nil {
		t.Errorf("ServerByID(s3) = %v, %v; want nil, nil", s, err)
	}
}
