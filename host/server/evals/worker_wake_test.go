package evals

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// A blocked evaluation woken while a worker runs it, by a change after the
// state the worker planned from, goes through the worker once more: the
// first run cannot place and re-blocks it, its ack hands it out again
// (wakeAgain), and the second run, from a state with the new node,
// places the alloc and completes it. Exactly two runs; nothing is left
// in the broker.
func TestWakeDuringRunRerunsThroughTheWorker(t *testing.T) {
	c := &fsmCore{f: fsm.New(testutil.Logger(t))}
	node := func(id string, cpu int64) error {
		_, err := c.Apply(context.Background(), fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: id, Name: id,
			Status: pb.NodeStatus_NODE_STATUS_READY, Resources: &pb.NodeResources{CpuMhz: cpu, MemoryMb: 1000},
			Drivers: map[string]*pb.DriverInfo{"mock": {Name: "mock", Detected: true, Healthy: true}}}})
		return err
	}
	c.must(t, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web", Name: "web", Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50,
		Groups: []*pb.TaskGroup{{Name: "g", Count: 1, Tasks: []*pb.Task{{Name: "t", Driver: "mock",
			Resources: &pb.TaskResources{CpuMhz: 500, MemoryMb: 1}}}}}}})
	c.must(t, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: []*pb.Evaluation{{Id: "B", JobId: "web", Priority: 50,
		Type: pb.JobType_JOB_TYPE_SERVICE, Status: pb.EvalStatus_EVAL_STATUS_BLOCKED,
		TriggeredBy: pb.EvalTrigger_EVAL_TRIGGER_QUEUED_ALLOCS, SnapshotIndex: c.index}}})
	if err := node("small", 100); err != nil {
		t.Fatal(err)
	}

	var (
		runs    atomic.Int32
		hookErr error
	)
	var r *Runner
	r = NewRunner(c, Config{Logger: testutil.Logger(t)}, Hooks{BeforePlan: func(_ context.Context, e *pb.Evaluation) {
		if runs.Add(1) != 1 {
			return
		}
		// During the first run, after it planned: a node that fits joins,
		// and the feed's pass sees it.
		err := node("big", 1000)
		snap := c.State().Snapshot()
		var blocked []*pb.Evaluation
		if err == nil {
			blocked, err = snap.EvalsByStatus(nil, pb.EvalStatus_EVAL_STATUS_BLOCKED)
		}
		if err == nil {
			err = r.unblock(memdb.NewWatchSet(), snap, blocked, false)
		}
		hookErr = err
	}})
	r.broker.SetEnabled(true)
	unblockOnce(t, c, r) // "small" changed after B's snapshot: woken
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	// The worker alone, no feed: only the wake in the hook can re-run B.
	r.runWorkers(ctx, 1, func(f func()) { wg.Go(f) })

	testutil.WaitFor(t, 10*time.Second, func() error {
		e, err := c.State().Snapshot().EvalByID(nil, "B")
		if err != nil {
			return err
		}
		if e.GetStatus() != pb.EvalStatus_EVAL_STATUS_COMPLETE {
			return fmt.Errorf("B is %v after %d runs", e.GetStatus(), runs.Load())
		}
		if _, outstanding, waiting, delayed := r.broker.Stats(); outstanding+waiting+delayed != 0 {
			return errors.New("the broker still holds work")
		}
		return nil
	})
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
	allocs, err := c.State().Snapshot().AllocsByJob(nil, "web")
	if err != nil {
		t.Fatal(err)
	}
	if len(allocs) != 1 || allocs[0].GetNodeId() != "big" {
		t.Fatalf("allocs %v, want one on big", allocs)
	}
}
