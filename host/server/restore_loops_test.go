package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/volumeloops/volumetest"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// Every leader duty must work on the state an operator snapshot restore
// installs, without a leader change: these tests restore on the leader of
// a one-server cluster (no other server could take over) and then need
// each duty to act on the restored state.

// restoreOn restores data on s and fails the test on error.
func restoreOn(t *testing.T, tc *testCluster, s *Server, data []byte) {
	t.Helper()
	if err := restoreSnapshot(tc, s, data); err != nil {
		t.Fatalf("restore: %v", err)
	}
}

// registerNodes registers nodes through s.
func registerNodes(t *testing.T, tc *testCluster, s *Server, nodes ...*pb.Node) {
	t.Helper()
	for _, n := range nodes {
		if _, err := tc.register(s, n); err != nil {
			t.Fatal(err)
		}
	}
}

func registerJob(t *testing.T, tc *testCluster, s *Server, j *pb.Job) *pb.JobRegisterResponse {
	t.Helper()
	resp, err := pb.NewJobsClient(tc.conn(s)).Register(ctx10s(t), &pb.JobRegisterRequest{Job: j})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// The eval feed and the scheduler workers (and the plan they apply) see a
// job registered after the restore.
func TestAfterRestoreAJobRegisteredIsPlaced(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	registerNodes(t, tc, s, workNode("n1"), workNode("n2"))
	registerJob(t, tc, s, serviceJob("before", 1))
	waitAllocs(t, tc, s, "before", 1, nil)
	snap := saveSnapshot(t, tc, s)
	restoreOn(t, tc, s, snap)

	reg := registerJob(t, tc, s, serviceJob("web", 2))
	waitAllocs(t, tc, s, "web", 2, nil)
	testutil.WaitFor(t, 10*time.Second, func() error {
		e, err := s.State().EvalByID(nil, reg.GetEvalId())
		if err != nil || e == nil {
			return fmt.Errorf("eval %s: %v %v", reg.GetEvalId(), e, err)
		}
		if e.GetStatus() != pb.EvalStatus_EVAL_STATUS_COMPLETE {
			return fmt.Errorf("eval %s is %s", e.GetId(), e.GetStatus())
		}
		return nil
	})
}

// The broker is seeded from the restored evaluations: one that was
// pending when the snapshot was taken, and that this leader has finished
// since, is pending again in the restored state and is planned again.
func TestAfterRestoreARestoredPendingEvalIsPlanned(t *testing.T) {
	var hold atomic.Bool
	hold.Store(true)
	inHand := make(chan string, 8)
	release := make(chan struct{})
	tc := newTestCluster(t, 1, func(c *testConfig) {
		c.hooks = &testHooks{beforePlan: func(ctx context.Context, e *pb.Evaluation) {
			if !hold.Load() {
				return
			}
			inHand <- e.GetId()
			select {
			case <-release:
			case <-ctx.Done():
			}
		}}
	})
	s := tc.servers[0]
	registerNodes(t, tc, s, workNode("n1"), workNode("n2"))
	reg := registerJob(t, tc, s, serviceJob("web", 2))
	if id := <-inHand; id != reg.GetEvalId() {
		t.Fatalf("worker holds eval %s, want %s", id, reg.GetEvalId())
	}
	snap := saveSnapshot(t, tc, s) // the eval is pending in it
	hold.Store(false)
	close(release)
	first := map[string]bool{}
	for _, a := range waitAllocs(t, tc, s, "web", 2, nil) {
		first[a.GetId()] = true
	}

	// The restored state has the eval pending and no allocs: the ones
	// placed now are new, planned from the restored eval.
	restoreOn(t, tc, s, snap)
	waitAllocs(t, tc, s, "web", 2, func(as []*pb.Allocation) error {
		for _, a := range as {
			if first[a.GetId()] || a.GetEvalId() != reg.GetEvalId() {
				return fmt.Errorf("alloc %s (eval %s): want a new alloc of eval %s", a.GetId(), a.GetEvalId(), reg.GetEvalId())
			}
		}
		return nil
	})
}

// The heartbeat timers follow the restored nodes, and a restored node
// that stops heartbeating is marked down and its allocs replaced.
func TestAfterRestoreADownNodesAllocsAreReplaced(t *testing.T) {
	tc, s, n1, n2 := webOnTwoNodes(t)
	snap := saveSnapshot(t, tc, s)
	// A node registered after the snapshot is not in the restored state:
	// no timer may stay armed for it.
	gone := workNode("gone")
	registerNodes(t, tc, s, gone)
	restoreOn(t, tc, s, snap)
	if s.heartbeats.Tracked(gone.GetId()) || !s.heartbeats.Tracked(n1.GetId()) {
		t.Fatalf("after restore: node not in the snapshot tracked %t, restored node tracked %t",
			s.heartbeats.Tracked(gone.GetId()), s.heartbeats.Tracked(n1.GetId()))
	}

	letNodeGoDown(t, tc, s, n1, n2)
	waitAllocs(t, tc, s, "web", 2, func(as []*pb.Allocation) error {
		if m := perNode(as); m[n2.GetId()] != 2 {
			return fmt.Errorf("per node %v, want both on n2", m)
		}
		return nil
	})
}

// The drainer acts on a drain set after the restore.
func TestAfterRestoreADrainMovesAllocs(t *testing.T) {
	tc, s, n1, _ := webOnTwoNodes(t)
	restoreOn(t, tc, s, saveSnapshot(t, tc, s))

	if _, err := pb.NewNodeOpsClient(tc.conn(s)).UpdateDrain(ctx10s(t), &pb.NodeDrainRequest{
		NodeId: n1.GetId(), Drain: &pb.DrainStrategy{DeadlineMs: int64(time.Hour / time.Millisecond)},
	}); err != nil {
		t.Fatal(err)
	}
	waitAllocs(t, tc, s, "web", 2, func(as []*pb.Allocation) error {
		if m := perNode(as); m[n1.GetId()] != 0 {
			return fmt.Errorf("web per node %v, want none on the draining n1", m)
		}
		return nil
	})
}

// GC measures age in raft indexes through a time table of this
// leadership. A restore brings rows whose age the table cannot tell (they
// are older than the indexes it recorded): their age counts from the
// restore, as from a new leader's start, so a finished job of the restored
// state is not collected as soon as it arrives.
func TestAfterRestoreGCDoesNotAgeRestoredRowsByTheOldTable(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	registerNodes(t, tc, s, workNode("n1"))
	registerJob(t, tc, s, serviceJob("old", 1))
	waitAllocs(t, tc, s, "old", 1, nil)
	if _, err := pb.NewJobsClient(tc.conn(s)).Deregister(ctx10s(t), &pb.JobDeregisterRequest{JobId: "old"}); err != nil {
		t.Fatal(err)
	}
	waitAllocs(t, tc, s, "old", 0, nil)
	snap := saveSnapshot(t, tc, s)
	// The GC's table records the index reached now, above every row of
	// the snapshot.
	registerJob(t, tc, s, serviceJob("later", 1))
	waitAllocs(t, tc, s, "later", 1, nil)
	latest, err := s.State().LatestIndex()
	if err != nil {
		t.Fatal(err)
	}
	start := s.cfg.Clock.Now()
	s.gcTimes.record(start, latest, s.gc.threshold)
	tc.clock.Advance(s.gc.threshold + time.Minute)

	restoreOn(t, tc, s, snap)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if idx := s.gcTimes.indexAt(start); idx != 0 {
			return fmt.Errorf("GC time table still maps %s to index %d of the replaced state", start.Format(time.RFC3339), idx)
		}
		return nil
	})
	if _, err := s.collectGarbage(ctx10s(t), false); err != nil {
		t.Fatal(err)
	}
	if j, err := s.State().JobByID(nil, "old"); err != nil || j == nil {
		t.Fatalf("restored stopped job collected at once by age: %v %v", j, err)
	}
}

// The attach reconciler publishes a claim made after the restore, and the
// reaper frees it once released.
func TestAfterRestoreAttachAndReapWork(t *testing.T) {
	fake := volumetest.NewController()
	vc := newVolCluster(t, 1, fake)
	s := vc.servers[0]
	restoreOn(t, vc.testCluster, s, saveSnapshot(t, vc.testCluster, s))

	vc.claimOnN2()
	vc.waitAttachments(oneAttached)
	vc.apply(fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "c1"})
	vc.apply(fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{{ClaimId: "c1", State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: vc.n2.GetId()}}})
	vc.waitAttachments(func(atts []*pb.Attachment) error {
		if len(atts) != 0 {
			return fmt.Errorf("attachments of v1 %v, want none", atts)
		}
		return nil
	})
	if c, _ := s.State().ClaimByID(nil, "c1"); c != nil {
		t.Fatalf("claim after the detach: %v, want freed", c)
	}
	if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 1 {
		t.Fatalf("%d unpublishes, want 1", n)
	}
}

// webOnTwoNodes starts one server with nodes n1 and n2 and job web placed
// on both, one alloc each.
func webOnTwoNodes(t *testing.T) (*testCluster, *Server, *pb.Node, *pb.Node) {
	t.Helper()
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	n1, n2 := workNode("n1"), workNode("n2")
	registerNodes(t, tc, s, n1, n2)
	registerJob(t, tc, s, serviceJob("web", 2))
	waitAllocs(t, tc, s, "web", 2, func(as []*pb.Allocation) error {
		if m := perNode(as); len(m) != 2 {
			return fmt.Errorf("per node %v", m)
		}
		return nil
	})
	return tc, s, n1, n2
}
