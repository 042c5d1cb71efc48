package evals

import (
	"context"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

func evalRow(t *testing.T, c *fsmCore, id string) *pb.Evaluation {
	t.Helper()
	e, err := c.State().Snapshot().EvalByID(nil, id)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// runNext dequeues the next evaluation, requires it to be want, processes
// it and acks it.
func runNext(t *testing.T, r *Runner, want string) {
	t.Helper()
	e, tok := mustDequeue(t, r.broker)
	if e.GetId() != want {
		t.Fatalf("dequeued %s, want %s", e.GetId(), want)
	}
	done, planned, err := r.processEval(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.broker.ackPlanned(e.GetId(), tok, done, planned); err != nil {
		t.Fatal(err)
	}
}

// A blocked evaluation B1 woken in memory waits behind its job's pending
// evaluation E2; E2's run still cannot place, makes a new blocked
// evaluation and cancels B1. The woken copy of B1 is then handed out: it
// is not planned, and its row stays cancelled (before: it was planned and
// its outcome turned "canceled" back into "blocked", cancelling E2's new
// blocked evaluation in turn).
func TestWokenEvalCancelledMeanwhileIsNotPlanned(t *testing.T) {
	c := &fsmCore{f: fsm.New(testutil.Logger(t))}
	node := func(id string) {
		c.must(t, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: id, Name: id, Status: pb.NodeStatus_NODE_STATUS_READY,
			Resources: &pb.NodeResources{CpuMhz: 1000, MemoryMb: 1000}}})
	}
	node("n1")
	c.must(t, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web", Name: "web", Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50,
		Groups: []*pb.TaskGroup{{Name: "g", Count: 1, Tasks: []*pb.Task{{Name: "t", Driver: "mock",
			Resources: &pb.TaskResources{CpuMhz: 1 << 20, MemoryMb: 1}}}}}}})
	c.must(t, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: []*pb.Evaluation{{Id: "B1", JobId: "web", Priority: 50,
		Type: pb.JobType_JOB_TYPE_SERVICE, Status: pb.EvalStatus_EVAL_STATUS_BLOCKED,
		TriggeredBy: pb.EvalTrigger_EVAL_TRIGGER_QUEUED_ALLOCS, SnapshotIndex: c.index}}})
	var plannedEvals []string
	r := NewRunner(c, Config{}, Hooks{BeforePlan: func(_ context.Context, e *pb.Evaluation) {
		plannedEvals = append(plannedEvals, e.GetId())
	}})
	r.broker.SetEnabled(true)
	node("n2")
	c.must(t, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: []*pb.Evaluation{{Id: "E2", JobId: "web", Priority: 50,
		Type: pb.JobType_JOB_TYPE_SERVICE, Status: pb.EvalStatus_EVAL_STATUS_PENDING,
		TriggeredBy: pb.EvalTrigger_EVAL_TRIGGER_JOB_REGISTER}}})
	// One feed pass: pending first, then blocked.
	pending, err := c.State().Snapshot().EvalsByStatus(nil, pb.EvalStatus_EVAL_STATUS_PENDING)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range pending {
		r.broker.enqueue(e)
	}
	unblockOnce(t, c, r)

	runNext(t, r, "E2")
	b1, e2 := evalRow(t, c, "B1"), evalRow(t, c, "E2")
	if b1.GetStatus() != pb.EvalStatus_EVAL_STATUS_CANCELED || e2.GetBlockedEval() == "" {
		t.Fatalf("after E2: B1 %v, E2 blocked_eval %q; want B1 cancelled and a new blocked eval", b1.GetStatus(), e2.GetBlockedEval())
	}
	runNext(t, r, "B1")
	if got := evalRow(t, c, "B1"); got.GetStatus() != pb.EvalStatus_EVAL_STATUS_CANCELED || got.GetModifyIndex() != b1.GetModifyIndex() {
		t.Fatalf("after the woken copy: B1 %v %q at %d, want it left cancelled at %d",
			got.GetStatus(), got.GetStatusDescription(), got.GetModifyIndex(), b1.GetModifyIndex())
	}
	if b2 := evalRow(t, c, e2.GetBlockedEval()); b2.GetStatus() != pb.EvalStatus_EVAL_STATUS_BLOCKED {
		t.Fatalf("E2's blocked eval %s is %v %q, want blocked", b2.GetId(), b2.GetStatus(), b2.GetStatusDescription())
	}
	if len(plannedEvals) != 1 || plannedEvals[0] != "E2" {
		t.Fatalf("planned %v, want only E2", plannedEvals)
	}
	requireNothingReady(t, r.broker)

	// A woken copy whose row was cancelled and collected meanwhile is not
	// planned and not brought back.
	gone := &pb.Evaluation{Id: "gone", JobId: "web", Priority: 50, Type: pb.JobType_JOB_TYPE_SERVICE,
		Status: pb.EvalStatus_EVAL_STATUS_BLOCKED, TriggeredBy: pb.EvalTrigger_EVAL_TRIGGER_QUEUED_ALLOCS}
	c.must(t, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: []*pb.Evaluation{gone}})
	woken := evalRow(t, c, "gone")
	woken.Status = pb.EvalStatus_EVAL_STATUS_PENDING
	cancelled := evalRow(t, c, "gone")
	cancelled.Status = pb.EvalStatus_EVAL_STATUS_CANCELED
	c.must(t, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: []*pb.Evaluation{cancelled}})
	c.must(t, fsm.GC, &pb.GCCommand{EvalIds: []string{"gone"}})
	if evalRow(t, c, "gone") != nil {
		t.Fatal("the cancelled evaluation was not collected")
	}
	r.broker.wake(woken, c.index)
	runNext(t, r, "gone")
	if e := evalRow(t, c, "gone"); e != nil {
		t.Fatalf("a collected evaluation was stored again: %v", e.GetStatus())
	}
}
