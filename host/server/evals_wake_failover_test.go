package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// TestWokenBlockedEvalSurvivesLeaderLoss: a blocked evaluation woken in
// memory (a node that fits joins) is in a worker's hand, its row still
// blocked in the replicated state, when its leader is partitioned. The new
// leader's first pass wakes it and places the job, once; the evaluation
// ends complete.
func TestWokenBlockedEvalSurvivesLeaderLoss(t *testing.T) {
	var holding atomic.Bool
	inHand := make(chan string, 16)
	release := make(chan struct{})
	tc := newTestCluster(t, 3, func(c *testConfig) {
		c.hooks = &testHooks{beforePlan: func(ctx context.Context, eval *pb.Evaluation) {
			if !holding.Load() || eval.GetTriggeredBy() != pb.EvalTrigger_EVAL_TRIGGER_QUEUED_ALLOCS {
				return
			}
			select {
			case inHand <- eval.GetId():
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}}
	})
	leader := tc.waitLeader()
	jobs := pb.NewJobsClient(tc.conn(leader))
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: serviceJob("web", 1)}); err != nil {
		t.Fatal(err)
	}
	var blocked string
	testutil.WaitFor(t, 15*time.Second, func() error {
		evs, err := leader.State().EvalsByStatus(nil, pb.EvalStatus_EVAL_STATUS_BLOCKED)
		if err != nil || len(evs) != 1 {
			return fmt.Errorf("blocked evals %v (%v), want one (no node)", evs, err)
		}
		blocked = evs[0].GetId()
		return nil
	})
	holding.Store(true)
	if _, err := tc.register(leader, workNode("n0")); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-inHand:
		if id != blocked {
			t.Fatalf("the worker holds %s, want the blocked eval %s", id, blocked)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the blocked evaluation was not woken into a worker")
	}
	if e, err := leader.State().EvalByID(nil, blocked); err != nil || e.GetStatus() != pb.EvalStatus_EVAL_STATUS_BLOCKED {
		t.Fatalf("the woken evaluation's row: %v (%v), want still blocked", e.GetStatus(), err)
	}
	tc.partition(leader)
	newLeader := tc.waitLeader(leader)
	holding.Store(false)
	close(release)
	waitAllocs(t, tc, newLeader, "web", 1, nil)
	tc.heal(leader)
	testutil.WaitFor(t, 15*time.Second, func() error {
		e, err := newLeader.State().EvalByID(nil, blocked)
		if err != nil || e.GetStatus() != pb.EvalStatus_EVAL_STATUS_COMPLETE {
			return fmt.Errorf("eval %s: %v (%v), want complete", blocked, e.GetStatus(), err)
		}
		return nil
	})
	resp, err := pb.NewJobsClient(tc.conn(newLeader)).Allocations(ctx10s(t), &pb.JobAllocationsRequest{JobId: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetAllocs()); n != 1 {
		t.Fatalf("job web has %d allocs, want 1: placed once", n)
	}
}
